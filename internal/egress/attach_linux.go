package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/link"
	"github.com/airlock-dev/airlock/internal/netstack"
)

// Attach starts the transparent door on the sandbox's link: its netstack
// takes every frame, DNS is answered at dnsIP, and every TCP connection goes
// to the gateway under the name its address stands for. Attach owns l.File.
func (nw *Egress) Attach(l link.Link) error {
	if nw.dns == nil {
		l.File.Close()
		return errors.New("egress: a link in proxy mode")
	}
	var mu sync.Mutex
	udpSeen := map[netip.AddrPort]bool{}
	st, err := netstack.New(netstack.Config{
		Link: l, MTU: uint32(tapNet.MTU), Addrs: []netip.Addr{gatewayIP, dnsIP},
		Connect: func(ctx context.Context, dst netip.AddrPort) func(net.Conn) {
			host := dst.Addr().String()
			if name, ok := nw.dns.Pool.Name(dst.Addr()); ok {
				host = name
			}
			return nw.gw.Accept(ctx, host, dst.Port())
		},
		DroppedUDP: func(_, dst netip.AddrPort) {
			mu.Lock()
			defer mu.Unlock()
			if udpSeen[dst] || len(udpSeen) > maxUDPLogs {
				return
			}
			udpSeen[dst] = true
			r := audit.Record{Kind: "network", IP: dst.Addr().String(), Port: int(dst.Port()), Decision: "deny", Rule: "udp",
				Reason: "UDP is not forwarded; only DNS to " + dnsIP.String() + " is answered"}
			if len(udpSeen) > maxUDPLogs {
				r.Reason += fmt.Sprintf("; more than %d destinations, further ones not recorded", maxUDPLogs)
			}
			nw.audit.Write(r)
		},
	})
	if err != nil {
		return err
	}
	nw.stack = st
	nw.dialIn = func(ctx context.Context, to netip.AddrPort) (net.Conn, error) {
		return st.DialTCP(ctx, netip.AddrPortFrom(gatewayIP, 0), to)
	}
	dnsAddr := netip.AddrPortFrom(dnsIP, 53)
	pc, err := st.ListenPacket(dnsAddr)
	if err != nil {
		return fmt.Errorf("DNS over UDP: %w", err)
	}
	ln, err := st.Listen(dnsAddr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("DNS over TCP: %w", err)
	}
	nw.dnsUDP, nw.dnsTCP = pc, ln
	go (&dns.Server{PacketConn: pc, Handler: nw.dns}).ActivateAndServe()
	go (&dns.Server{Listener: ln, Handler: nw.dns, ReadTimeout: 10 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }}).ActivateAndServe()
	return nil
}

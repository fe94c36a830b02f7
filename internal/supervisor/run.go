package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// IO is the supervisor's own stdio: the main command gets it.
type IO struct {
	Stdin, Stdout, Stderr *os.File
}

type supervisor struct {
	h    *state.Handle
	spec Spec
	io   IO
	sb   sandbox

	stopOnce sync.Once
	stop     chan string // why the sandbox is being stopped from outside
}

// forwarded are the signals passed on to the main command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// Run runs the sandbox described by spec until its main command ends (or,
// with no command, until it is killed) and returns the exit code. ready, if
// set, is called once: with nil when the sandbox runs, or with the error that
// stopped it from starting — in which case nothing is left in the state dir.
// spawned, if not nil, is a guest from native.Spawn that the caller started
// early to overlap its start with the caller's own work; Run owns it.
func Run(h *state.Handle, spec Spec, stdio IO, ready func(error), spawned *native.Sandbox) (int, error) {
	sv := &supervisor{h: h, spec: spec, io: stdio, stop: make(chan string, 1)}
	var err error
	notify := func(err error) {
		if ready != nil {
			ready(err)
			ready = nil
		}
	}
	fail := func(err error) (int, error) {
		if spawned != nil {
			spawned.Close() // idempotent: Start closes it on its own errors too
		}
		workspace.Release(WorkspaceDir(h.Dir())) // an overlay that was mounted leaves a mode-0 dir
		h.Remove()
		notify(err)
		return ExitAirlock, err
	}
	if spec.Network.enabled() {
		switch {
		case spec.backend() != BackendDocker:
			if spec.Network.Mode, _, err = NetworkMode(spec.Network.Mode); err != nil {
				return fail(err)
			}
		case spec.Network.Mode == ModeTransparent:
			return fail(errors.New("--network-mode transparent: a docker sandbox reaches the gateway through its proxy door; use --network-mode proxy (or auto)"))
		default:
			spec.Network.Mode = ModeProxy
		}
		sv.spec = spec
	}
	config, err := json.Marshal(spec)
	if err != nil {
		return fail(err)
	}
	rec := state.Record{
		ID: h.ID(), Name: h.Name(), CreatedAt: time.Now().UTC(), PID: os.Getpid(), Backend: spec.backend(),
		Workspace: spec.Native.Workspace, Command: spec.Command, Detached: spec.Detached, Config: config,
	}
	sock := h.SocketPath()
	var nw *network
	if spec.Network.enabled() {
		if nw, err = startNetwork(spec.Network, h.ID(), h.Dir(), gatewaySocket(sock)); err != nil {
			return fail(err)
		}
		defer nw.Close()
		spec.Native.Files = append(spec.Native.Files, nw.files...)
		spec.Native.Relay, spec.Native.Net = nw.relay, nw.net
		spec.Env = MergeEnv(spec.Env, nw.env)
		sv.spec = spec
	}
	ws, err := prepareWorkspace(h.Dir(), &spec, stdio.Stderr)
	if err != nil {
		return fail(err)
	}
	sv.spec = spec
	var ln *net.UnixListener
	register := func(cgroups []string) error {
		rec.Cgroups = cgroups
		if err := h.WriteRecord(rec); err != nil {
			return err
		}
		os.Remove(sock)
		var err error
		if ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"}); err != nil {
			return fmt.Errorf("control socket: %w", err)
		}
		return nil
	}
	var warnings []string
	if spec.backend() == BackendDocker {
		sv.sb, warnings, err = startDocker(h, spec, register)
	} else {
		sv.sb, warnings, err = startNative(spawned, spec, stdio, register)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return fail(err)
	}
	defer sv.sb.Close()
	defer func() { ln.Close(); os.Remove(sock) }()
	if nb, ok := sv.sb.(*native.Sandbox); ok && nb.TAP != nil {
		if err := nw.attach(nb.TAP); err != nil {
			return fail(fmt.Errorf("transparent network: %w", err))
		}
	}
	if err := ws.Ready(); err != nil {
		return fail(err)
	}
	ws.Background()
	if !spec.Quiet {
		for _, w := range warnings {
			fmt.Fprintf(stdio.Stderr, "airlock: warning: %s\n", w)
		}
	}
	go sv.serveControl(ln)
	if err := h.SetStatus(state.Status{State: state.Running}); err != nil {
		return fail(err)
	}
	notify(nil)

	code, reason := sv.main()
	oom := sv.sb.OOMKilled()
	closed := make(chan struct{})
	go func() { sv.sb.Close(); close(closed) }()
	defer func() { <-closed }() // teardown overlaps with the state updates below
	if oom && reason == "" {
		reason = fmt.Sprintf("the sandbox reached its memory limit (%d MiB) and the kernel killed a process", spec.Native.Limits.MemoryBytes>>20)
	}
	if reason != "" && !spec.Quiet {
		fmt.Fprintf(stdio.Stderr, "airlock: %s\n", reason)
	}
	// Every process is gone before the workspace is read: nothing can
	// change it while it is reviewed. Natively that is when the guest is
	// reaped (the kernel reaps a PID namespace's processes before its init);
	// removing the cgroups goes on meanwhile. A container is gone when closed.
	if _, ok := sv.sb.(*native.Sandbox); ok {
		<-sv.sb.Done()
	} else {
		<-closed
	}
	keep := sv.reviewWorkspace(ws, h.ID())
	now := time.Now().UTC()
	st := state.Status{State: state.Exited, ExitCode: &code, FinishedAt: &now, Error: reason}
	if !spec.Detached && !spec.Network.enabled() && !keep {
		// A foreground sandbox leaves nothing behind; its result is its exit
		// code. One with network keeps its audit log for `airlock audit`.
		h.Remove()
		return code, nil
	}
	// `airlock kill` (and then rm) waits for this status: write it only when
	// all is torn down (a container's removal takes a while).
	<-closed
	h.SetStatus(st)
	h.Release()
	return code, nil
}

// gatewaySocket is where the gateway's front door listens: beside the
// control socket under a name no longer than its, so it fits sun_path
// (108 bytes) wherever the control socket does.
func gatewaySocket(ctl string) string {
	if dir, base := filepath.Split(ctl); base == "ctl.sock" {
		return dir + "gw.sock"
	}
	return strings.TrimSuffix(ctl, ".sock") + ".gw"
}

// requestStop ends the sandbox from outside (airlock kill, a signal to an idle one).
func (sv *supervisor) requestStop(why string) {
	sv.stopOnce.Do(func() { sv.stop <- why })
}

// main runs the main command and returns its exit code and, when airlock
// ended it, why.
func (sv *supervisor) main() (int, string) {
	var timeout <-chan time.Time
	if sv.spec.Timeout > 0 {
		t := time.NewTimer(sv.spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	timedOut := fmt.Sprintf("stopped the sandbox: --timeout %s reached", sv.spec.Timeout)

	if len(sv.spec.Command) == 0 { // idle until stopped
		for {
			select {
			case why := <-sv.stop:
				return 0, why
			case <-timeout:
				return ExitTimeout, timedOut
			case s := <-sigs:
				if s == syscall.SIGWINCH {
					continue
				}
				return 128 + int(s.(syscall.Signal)), ""
			case <-sv.sb.Done():
				return ExitAirlock, "the sandbox's agent exited unexpectedly"
			}
		}
	}

	req := &proto.Exec{Argv: sv.spec.Command, Env: sv.spec.Env, Dir: sv.spec.Native.Workspace, TTY: sv.spec.TTY}
	var (
		p   *native.Process
		err error
		t   *terminal
	)
	if sv.spec.TTY {
		req.Rows, req.Cols = termSize(sv.io.Stdin)
		p, err = sv.sb.Exec(req, nil)
	} else {
		req.Stdio = proto.StdioFDs
		p, err = sv.sb.Exec(req, nil, sv.io.Stdin, sv.io.Stdout, sv.io.Stderr)
	}
	if err != nil {
		return ExitAirlock, err.Error()
	}
	if p.PID == 0 && sv.spec.TTY { // never started; the reason had no terminal to go to
		e, _ := p.Wait()
		fmt.Fprintf(sv.io.Stderr, "airlock: %s\n", e.Reason)
		return e.Code, ""
	}
	drain := func() {}
	if p.PTY != nil {
		t = openTerminal(sv.io.Stdin, sv.io.Stdout)
		defer t.restore()
		defer p.PTY.Close()
		drain = t.relay(p.PTY)
	}
	type result struct {
		e   *proto.Exit
		err error
	}
	exited := make(chan result, 1)
	go func() {
		e, err := p.Wait()
		exited <- result{e, err}
	}()
	for {
		select {
		case r := <-exited:
			drain()
			if r.err != nil {
				return ExitAirlock, "the sandbox's agent exited unexpectedly"
			}
			return r.e.Code, ""
		case s := <-sigs:
			if s == syscall.SIGWINCH {
				if p.PTY != nil {
					t.resize(p.PTY)
				}
				continue
			}
			p.Signal(s.(syscall.Signal))
		case <-timeout:
			return ExitTimeout, timedOut
		case why := <-sv.stop:
			return 128 + int(syscall.SIGKILL), why
		}
	}
}

var errNotRunning = errors.New("sandbox is not running")

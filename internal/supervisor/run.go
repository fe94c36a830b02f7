// Package supervisor hosts one engine sandbox for the CLI: it runs the main
// command with the user's terminal or stdio, forwards signals, enforces the
// timeout, reviews the workspace after, and records how the sandbox ended
// in the state dir. Detached sandboxes run the same host in the background.
package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/memtrim"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/trace"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Exit codes airlock itself uses, as docker and timeout(1) do.
const (
	ExitAirlock = 125 // airlock failed, not the command
	ExitTimeout = 124 // --timeout ended the sandbox
)

type supervisor struct {
	h    *state.Handle
	spec engine.Spec
	io   term.IO
	sb   *engine.Sandbox
	// record puts a review's outcome in the audit stream.
	record func(outcome string, n workspace.Counts)

	stopOnce sync.Once
	stop     chan string    // why the sandbox is being stopped from outside
	sigs     chan os.Signal // term.Forwarded, from watchStart on
	cons     *console       // a detached -t command's terminal, for airlock attach
	status   *statusSurface // a foreground -t --ask command's relay, with the prompt
	line     bool           // the line prompt asks (no -t)
}

// Options are what a host hands Run beside the spec.
type Options struct {
	// Ready, if set, is called once: with nil when the sandbox runs, or with
	// the error that stopped it from starting — in which case nothing is
	// left in the state dir.
	Ready func(error)
	// Pending, if not nil, is a sandbox engine.Prepare began early; Run owns it.
	Pending backend.Pending
	// Secrets given by value (never stored: a foreground run only).
	Secrets []*secrets.Secret
}

// Run runs the sandbox described by spec until its main command ends (or,
// with no command, until it is killed) and returns the exit code.
func Run(h *state.Handle, spec engine.Spec, stdio term.IO, ro Options) (int, error) {
	sv := &supervisor{h: h, spec: spec, io: stdio, stop: make(chan string, 1), sigs: make(chan os.Signal, 8)}
	ready := ro.Ready
	o := engine.Options{Stderr: stdio.Stderr, OnStop: sv.requestStop, Pending: ro.Pending, Secrets: ro.Secrets}
	// A foreground run without a terminal has only its decisions file.
	o.NobodyToAsk = spec.Config.Approvals.Ask() && !spec.Detached && !term.IsTerminal(stdio.Stderr)
	if !spec.Quiet && term.IsTerminal(stdio.Stderr) {
		o.Progress = ProgressBar(stdio.Stderr)
	}
	if len(spec.Command) > 0 {
		o.First = sv.command()
		if spec.Detached && spec.TTY {
			sv.cons = newConsole()
			o.Console = sv.cons
		}
	}
	defer signal.Stop(sv.sigs)
	ctx, early := sv.watchStart(&o)
	sb, err := engine.Start(ctx, h, spec, o)
	sig := early()
	if ready != nil {
		ready(err)
	}
	if err != nil {
		if sig != nil { // the signal ended the start: exit as it would have ended airlock
			return 128 + int(sig.(syscall.Signal)), nil
		}
		return ExitAirlock, err
	}
	if sig != nil {
		select { // the command gets it, as if it had come a moment later
		case sv.sigs <- sig:
		default:
		}
	}
	sv.sb, sv.record = sb, sb.RecordWorkspace
	// A sandbox that lives past its first second mostly waits (for its
	// command, its agent's next request): give back what waiting needs not.
	defer memtrim.Periodically(time.Second, 10*time.Second)()
	if q := sb.Approvals(); q != nil && !spec.Detached {
		if stop := sv.prompt(q); stop != nil {
			defer stop()
		}
		events, cancel := q.Subscribe(64)
		defer cancel()
		go sv.announce(events)
	}

	code, reason := sv.main()
	// The command the signals went to is gone. Ignored, a late ^C cannot
	// cut the teardown short (it was caught and dropped before), and the
	// deferred Stop has nothing left to undo: Stop hands each signal to the
	// runtime's signal thread in turn, a tenth of a millisecond and more at
	// the end of every run. The host exits once Run returns.
	signal.Ignore(term.Forwarded...)
	trace.Mark("supervisor: command exited")
	// Unless the memory limit killed a process or the review finds changes,
	// nothing will be kept: a bind sandbox's state dir then goes while its
	// processes end, but the workspace session the review reads (Stop).
	if oom := sb.Stop(!Kept(spec, h.Name(), false, reason)); oom && reason == "" {
		reason = fmt.Sprintf("the sandbox reached its memory limit (%d MiB) and the kernel killed a process", sb.Limits().MemoryBytes>>20)
	}
	trace.Mark("supervisor: sandbox stopped")
	if reason != "" {
		if !spec.Quiet {
			fmt.Fprintf(stdio.Stderr, "airlock: %s\n", reason)
		}
		sb.RecordCrash(reason)
	}
	// Every process is gone before the workspace is read (Stop): nothing can
	// change it while it is reviewed; the backend's cleanup goes on meanwhile.
	changes := sv.reviewWorkspace(sb.Session(), h.ID(), !Kept(spec, h.Name(), false, reason))
	trace.Mark("supervisor: workspace reviewed")
	now := time.Now().UTC()
	st := state.Status{State: state.Exited, ExitCode: &code, FinishedAt: &now, Error: reason}
	if !Kept(spec, h.Name(), changes, reason) {
		// A foreground sandbox leaves nothing behind: its result is its exit
		// code. An agent harness runs one per tool call; hundreds of records
		// nobody asked for would only make ls slower and the disk fuller.
		sb.Close(false)
		trace.Mark("supervisor: sandbox closed, state dir entry removed")
		return code, nil
	}
	if !spec.Detached && !spec.Quiet && !changes && h.Name() == "" {
		// Its id was never shown: say how to find what was kept.
		fmt.Fprintf(stdio.Stderr, "airlock: kept sandbox %s: airlock audit %s; airlock rm %s when done\n", h.ID(), h.ID(), h.ID())
	}
	// `airlock kill` (and then rm) waits for this status: write it only when
	// all is torn down (a container's removal takes a while).
	sb.Close(true)
	h.SetStatus(st)
	h.Release()
	return code, nil
}

// Kept says whether a sandbox's record, audit log and workspace session
// stay in the state dir after it ends: when it was detached, named (--name:
// found again by that name), asked to be kept (--keep), has workspace
// changes waiting for review (changes), or was ended by airlock (reason:
// a timeout, the memory limit, airlock kill, a crash), whose story is its
// audit log. Anything else, the common run of a command, leaves nothing.
func Kept(spec engine.Spec, name string, changes bool, reason string) bool {
	return spec.Detached || spec.Keep || name != "" || changes || reason != ""
}

// watchStart registers for the forwarded signals while the guest sets up
// (o.WhileSetup): the first signal.Notify costs up to a millisecond (the
// runtime hands each signal to its signal thread in turn), which so overlaps
// the guest's start instead of delaying the command. A signal that comes
// during the rest of the start ends it (ctx), as it ended the process before,
// unless the run's command has started (it starts before Start returns):
// then it is the command's. early returns that signal, or nil, once Start
// has returned.
func (sv *supervisor) watchStart(o *engine.Options) (ctx context.Context, early func() os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	running := make(chan struct{}) // closed as the run's command starts
	if o.First != nil {
		o.First.Started = func() { close(running) }
	}
	got := make(chan os.Signal, 1)
	watch := func() {
		signal.Notify(sv.sigs, term.Forwarded...)
		for {
			select {
			case s := <-sv.sigs:
				if s == syscall.SIGWINCH {
					continue
				}
				select {
				case <-running: // Run hands it on once Start returns
				default:
					cancel()
				}
				got <- s
				return
			case <-started:
				got <- nil
				return
			}
		}
	}
	var once sync.Once
	o.WhileSetup = func() { once.Do(func() { go watch() }) }
	return ctx, func() os.Signal {
		close(started)
		once.Do(watch) // never registered (the start failed first): nothing to wait for
		return <-got
	}
}

// requestStop ends the sandbox from outside (airlock kill, a signal to an idle one).
func (sv *supervisor) requestStop(why string) {
	sv.stopOnce.Do(func() { sv.stop <- why })
}

// main runs the main command and returns its exit code and, when airlock
// ended it, why.
func (sv *supervisor) main() (int, string) {
	var timeout <-chan time.Time
	limit := sv.spec.Config.Limits.Timeout
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	sigs := sv.sigs
	timedOut := fmt.Sprintf("stopped the sandbox: --timeout %s reached", limit)

	if len(sv.spec.Command) == 0 { // idle until stopped
		idle, stopIdle := sv.idleWatch()
		defer stopIdle()
		for {
			select {
			case why := <-sv.stop:
				return 0, why
			case <-timeout:
				return ExitTimeout, timedOut
			case why := <-idle:
				return ExitTimeout, why
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

	p, err := sv.sb.First()
	if err != nil {
		sv.ended(ExitAirlock)
		return ExitAirlock, err.Error()
	}
	trace.Mark("supervisor: command started")
	if p.PID == 0 && sv.spec.TTY { // never started; the reason had no terminal to go to
		e, _ := p.Wait()
		if e != nil {
			sv.ended(e.Code)
		}
		fmt.Fprintf(sv.io.Stderr, "airlock: %s\n", e.Reason)
		return e.Code, ""
	}
	drain := func() {}
	var t *term.Terminal
	if p.PTY != nil && sv.cons != nil {
		defer p.PTY.Close()
		sv.cons.start(p.PTY, p.Signal)
	} else if p.PTY != nil {
		t = term.Open(sv.io.Stdin, sv.io.Stdout)
		defer t.Restore()
		defer p.PTY.Close()
		t.Resize(p.PTY) // the size it was given was read before the start
		if sv.status != nil {
			drain = sv.status.relay(p.PTY)
		} else {
			drain = t.Relay(p.PTY)
		}
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
			if sv.cons != nil {
				e := r.e
				if r.err != nil {
					e = &proto.Exit{Code: ExitAirlock}
				}
				sv.cons.end(e, true)
			}
			if r.err != nil {
				return ExitAirlock, "the sandbox's agent exited unexpectedly"
			}
			return r.e.Code, ""
		case s := <-sigs:
			if s == syscall.SIGWINCH {
				if t != nil {
					t.Resize(p.PTY)
				}
				continue
			}
			p.Signal(s.(syscall.Signal))
		case <-timeout:
			sv.ended(ExitTimeout)
			return ExitTimeout, timedOut
		case why := <-sv.stop:
			sv.ended(128 + int(syscall.SIGKILL))
			return 128 + int(syscall.SIGKILL), why
		}
	}
}

// ended tells an attached terminal the command is being ended with code.
func (sv *supervisor) ended(code int) {
	if sv.cons != nil {
		sv.cons.end(&proto.Exit{Code: code}, false)
	}
}

// command is the run's main command, with the user's terminal (its size
// now; SIGWINCH brings later changes) or stdio; the engine adds the
// sandbox's environment and workspace. The sandbox ends with it (Last).
func (sv *supervisor) command() *engine.Command {
	req := &proto.Exec{Argv: sv.spec.Command, Dir: sv.spec.Workdir, TTY: sv.spec.TTY, Last: true}
	if sv.spec.TTY {
		req.Rows, req.Cols = term.Size(sv.io.Stdin)
		if sv.spec.Detached && req.Rows == 0 { // airlock attach gives it the client's
			req.Rows, req.Cols = defaultRows, defaultCols
		}
		return &engine.Command{Req: req}
	}
	req.Stdio = proto.StdioFDs
	return &engine.Command{Req: req, Files: []*os.File{sv.io.Stdin, sv.io.Stdout, sv.io.Stderr}}
}

// prompt asks on the run's own terminal (see prompter): a line without
// -t, the status row with it. It returns how to stop, or nil when the
// terminal cannot ask (announce's line then says where to answer).
func (sv *supervisor) prompt(q control.Approvals) (stop func()) {
	name := sv.h.Name()
	if name == "" {
		name = sv.h.ID()
	}
	if sv.spec.TTY {
		if !term.IsTerminal(sv.io.Stdin) || !term.IsTerminal(sv.io.Stdout) {
			return nil
		}
		keys, err := term.ParseKeys(sv.spec.Config.Terminal.AskKeys)
		if err != nil {
			keys, _ = term.ParseKeys(term.DefaultAskKeys)
		}
		sv.status = newStatusSurface(sv.io.Stdin, sv.io.Stdout, keys)
		events, cancel := q.Subscribe(64)
		go (&prompter{q: q, s: sv.status, sbName: name}).run(events)
		return cancel
	}
	if !term.IsTerminal(sv.io.Stderr) {
		return nil
	}
	l := openLineSurface(sv.io.Stderr)
	if l == nil {
		return nil
	}
	sv.line = true
	events, cancel := q.Subscribe(64)
	done := make(chan struct{})
	go func() {
		(&prompter{q: q, s: l, auto: true, sbName: name}).run(events)
		close(done)
	}()
	return func() {
		cancel()
		<-done
		l.close()
	}
}

// announce tells the user a request waits: one line on stderr when it is a
// terminal the command does not own (a -t command's full-screen display
// would be corrupted: there, and always, a desktop notification where
// notify-send exists).
func (sv *supervisor) announce(events <-chan approval.Event) {
	// The prompt (when up) says it itself.
	line := term.IsTerminal(sv.io.Stderr) && !sv.spec.TTY && !sv.line
	notify, _ := exec.LookPath("notify-send")
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		notify = ""
	}
	for e := range events {
		if e.Type != "request" {
			continue
		}
		r := e.Request
		msg := fmt.Sprintf("sandbox %s wants %s: airlock approve %s (or deny; airlock ui)", r.Sandbox, term.Printable(r.Subject), r.ID)
		if line {
			fmt.Fprintf(sv.io.Stderr, "\r\nairlock: waiting for a decision: %s\r\n", msg)
		}
		if notify != "" {
			if c := exec.Command(notify, "--app-name=airlock", "airlock: a decision is needed", msg); c.Start() == nil {
				go c.Wait()
			}
		}
	}
}

// idleWatch reports on the channel once the sandbox has gone
// limits.idle_timeout without use: no command running (an exec, which an
// attached terminal is) and no audited activity (a connection, a name
// looked up, a request, a file changed). It reads the audit stream, so
// what counts as use is what the audit log shows. Nil channel: no limit.
func (sv *supervisor) idleWatch() (<-chan string, func()) {
	limit := sv.spec.Config.Limits.IdleTimeout
	log := sv.sb.Audit()
	if limit <= 0 || log == nil {
		return nil, func() {}
	}
	recs, cancel := log.Subscribe(1024)
	out := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		running := map[string]bool{} // exec pids started and not yet ended
		t := time.NewTimer(limit)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case r, ok := <-recs:
				if !ok {
					return
				}
				switch r.Kind {
				case audit.KindLifecycle:
					continue // about the sandbox, not use of it
				case audit.KindAudit:
					if r.Decision != audit.DecisionSuppressed { // repeats of use are use
						continue
					}
				case audit.KindExec:
					pid := r.Extra["pid"]
					if r.ExitCode == nil && r.Decision == "" && pid != "" {
						running[pid] = true
					} else {
						delete(running, pid)
					}
				}
				t.Reset(limit)
			case <-t.C:
				if len(running) > 0 { // a quiet command is still use
					t.Reset(limit)
					continue
				}
				out <- fmt.Sprintf("stopped the sandbox: idle for %s (--idle-timeout: no command, terminal or network activity)", limit)
				return
			}
		}
	}()
	return out, func() { close(done); cancel() }
}

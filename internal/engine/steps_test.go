package engine

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/link"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/state"
)

// fakeBackend is a backend behind the contract (backend.Backend) that runs
// nothing: it records what the engine asks of it and what the engine had
// made by then, and fails where a test says.
type fakeBackend struct {
	caps        backend.Caps
	failPrepare error
	failStart   error // returned after register ran
	link        bool  // the instance hands back a network link

	mu       sync.Mutex
	events   []string
	pending  *fakePending
	inst     *fakeInstance
	h        *state.Handle // what the test checks at each call
	regErr   error
	sawEntry map[string]bool // event → the state dir entry existed
}

func (b *fakeBackend) note(ev string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, ev)
	if b.sawEntry == nil {
		b.sawEntry = map[string]bool{}
	}
	b.sawEntry[ev] = b.h.Published()
}

func (b *fakeBackend) Name() string       { return "fake" }
func (b *fakeBackend) Caps() backend.Caps { return b.caps }
func (b *fakeBackend) Prune(context.Context, string, func(string) bool) ([]string, error) {
	return nil, nil
}

func (b *fakeBackend) Prepare(context.Context, *backend.Spec) (backend.Pending, error) {
	b.note("prepare")
	if b.failPrepare != nil {
		return nil, b.failPrepare
	}
	b.pending = &fakePending{b: b}
	return b.pending, nil
}

type fakePending struct {
	b      *fakeBackend
	closed int
}

func (p *fakePending) Start(_ context.Context, _ *backend.Spec, register func([]string) error, first *backend.Command) (backend.Instance, error) {
	p.b.note("start")
	if err := register(nil); err != nil {
		p.b.regErr = err
		p.Close()
		return nil, err
	}
	p.b.note("registered")
	if p.b.failStart != nil {
		p.Close()
		return nil, p.b.failStart
	}
	p.b.inst = &fakeInstance{b: p.b, done: make(chan struct{})}
	return p.b.inst, nil
}

func (p *fakePending) Close() error { p.closed++; return nil }

type fakeInstance struct {
	b      *fakeBackend
	done   chan struct{}
	once   sync.Once
	closed int
	killed bool
}

func (i *fakeInstance) Exec(*proto.Exec, func(uint8, []byte), ...*os.File) (*guestclient.Process, error) {
	return nil, errors.New("fake: no exec")
}
func (i *fakeInstance) First() (*guestclient.Process, error) {
	return nil, errors.New("fake: no first")
}
func (i *fakeInstance) Call(context.Context, *proto.Msg) (*proto.Msg, error) {
	return nil, errors.New("fake: no call")
}
func (i *fakeInstance) Link() *link.Link {
	i.b.note("link")
	if !i.b.link {
		return nil
	}
	r, w, _ := os.Pipe()
	w.Close()
	return &link.Link{File: r}
}
func (i *fakeInstance) Done() <-chan struct{} { return i.done }
func (i *fakeInstance) OOMKilled() bool       { return false }
func (i *fakeInstance) GuestPID() int         { return 0 }
func (i *fakeInstance) Warnings() []string    { return nil }
func (i *fakeInstance) Kill()                 { i.killed = true }
func (i *fakeInstance) Close() error {
	i.closed++
	i.once.Do(func() { close(i.done) })
	return nil
}

// stepEnv is a state store, a workspace and a config dir of the test's own.
type stepEnv struct {
	store *state.Store
	ws    string
	spec  Spec
}

func newStepEnv(t *testing.T) *stepEnv {
	t.Helper()
	root := t.TempDir()
	for k, v := range map[string]string{"AIRLOCK_STATE_DIR": filepath.Join(root, "state"), "AIRLOCK_CONFIG_DIR": filepath.Join(root, "ca"),
		"XDG_CONFIG_HOME": filepath.Join(root, "config"), "HOME": filepath.Join(root, "home")} {
		t.Setenv(k, v)
	}
	store, err := state.Open(filepath.Join(root, "state"))
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(root, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644)
	return &stepEnv{store: store, ws: ws, spec: Spec{Config: config.Spec{Workspace: config.Workspace{Path: ws}}, Quiet: true}}
}

// left is what a sandbox left in the store: entries List sees, and
// whether its directory and control socket are still there.
func (e *stepEnv) left(t *testing.T, h *state.Handle) []string {
	t.Helper()
	var out []string
	entries, err := e.store.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		out = append(out, "entry "+en.Record.ID)
	}
	for _, p := range []string{h.Dir(), h.SocketPath(), gatewaySocket(h.SocketPath())} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func TestStartsStepsAreNamedInTheirOrder(t *testing.T) {
	var got []string
	for _, st := range (&Sandbox{}).steps() {
		got = append(got, st.name)
	}
	want := []string{"check spec", "prepare backend", "open record", "prepare workspace", "start egress", "publish ports", "start backend", "attach link"}
	if !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
}

func TestStartAsksTheBackendInOrderAndCloseLeavesWhatTheHostKeeps(t *testing.T) {
	cases := map[string]struct {
		caps backend.Caps
		// whether the state dir entry exists as the backend starts: only
		// where something before the start writes there (a run dir)
		entryAtStart bool
		keep         bool
	}{
		"a bind sandbox without a network makes its entry while the guest sets up": {backend.Caps{}, false, false},
		"a backend with a run dir has the entry before it starts":                  {backend.Caps{UsesRunDir: true}, true, false},
		"a kept sandbox leaves its entry to the host":                              {backend.Caps{}, false, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e := newStepEnv(t)
			h, err := e.store.Reserve()
			if err != nil {
				t.Fatal(err)
			}
			be := &fakeBackend{caps: c.caps, h: h}
			s, err := start(context.Background(), h, e.spec, Options{}, be)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			if want := []string{"prepare", "start", "registered", "link"}; !slices.Equal(be.events, want) {
				t.Errorf("the backend was asked %q, want %q", be.events, want)
			}
			if be.sawEntry["start"] != c.entryAtStart || !be.sawEntry["registered"] {
				t.Errorf("the entry existed at start: %v (want %v), once registered: %v (want true)", be.sawEntry["start"], c.entryAtStart, be.sawEntry["registered"])
			}
			entries, _ := e.store.List()
			if len(entries) != 1 || entries[0].Status.State != state.Running {
				t.Fatalf("a running sandbox is listed as %+v, want one running", entries)
			}
			if s.Session() == nil || s.Audit() == nil {
				t.Fatal("a running sandbox has no workspace session or audit stream")
			}
			if oom := s.Stop(false); oom || !be.inst.killed {
				t.Errorf("Stop: oom %v, killed %v; want no oom and a kill", oom, be.inst.killed)
			}
			if err := s.Close(c.keep); err != nil {
				t.Fatalf("Close(%v): %v", c.keep, err)
			}
			s.Close(c.keep) // a second Close does nothing
			if be.inst.closed != 1 || be.pending.closed != 0 {
				t.Errorf("the instance was closed %d times, the started pending %d; want 1 and 0", be.inst.closed, be.pending.closed)
			}
			left := e.left(t, h)
			if c.keep {
				if _, err := os.Stat(filepath.Join(h.Dir(), "audit.jsonl")); err != nil {
					t.Errorf("Close(true) kept no audit log: %v", err)
				}
				if _, err := os.Stat(h.SocketPath()); err == nil {
					t.Error("Close(true) left the control socket")
				}
				h.Release()
			} else if len(left) > 0 {
				t.Errorf("Close(false) left %q", left)
			}
		})
	}
}

func TestAFailureAtEachStepLeavesNothing(t *testing.T) {
	boom := errors.New("boom")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := map[string]struct {
		step  string
		setup func(e *stepEnv, h *state.Handle, be *fakeBackend)
		// whether the failure comes after the backend prepared or started
		prepared, started bool
	}{
		"a relative workspace fails the spec check": {step: "check spec", setup: func(e *stepEnv, _ *state.Handle, _ *fakeBackend) {
			e.spec.Config.Workspace.Path = "ws"
		}},
		"the backend cannot prepare": {step: "prepare backend", setup: func(_ *stepEnv, _ *state.Handle, be *fakeBackend) {
			be.failPrepare = boom
		}},
		"the audit stream cannot open": {step: "open record", prepared: true, setup: func(_ *stepEnv, h *state.Handle, be *fakeBackend) {
			be.caps.UsesRunDir = true
			os.Mkdir(filepath.Join(h.Dir(), "audit.jsonl"), 0o755)
		}},
		"a scratch dir cannot be made": {step: "prepare workspace", prepared: true, setup: func(e *stepEnv, h *state.Handle, _ *fakeBackend) {
			e.spec.Scratch = []string{"/scratch"}
			os.WriteFile(filepath.Join(h.Dir(), "scratch0"), nil, 0o644)
		}},
		"a malformed decisions file stops the egress": {step: "start egress", prepared: true, setup: func(e *stepEnv, _ *state.Handle, be *fakeBackend) {
			be.caps.NoLink = "no link here"
			bad := filepath.Join(filepath.Dir(e.ws), "decisions.yaml")
			os.WriteFile(bad, []byte("rules: [[[\n"), 0o644)
			e.spec.Config.Approvals = config.Approvals{Mode: config.ApprovalsAsk, Decisions: bad}
		}},
		"a published port without a network": {step: "check spec", setup: func(e *stepEnv, _ *state.Handle, _ *fakeBackend) {
			e.spec.Config.Ports = []string{"8000:8000"}
		}},
		"a published port where the guest cannot hand connections over and there is no link": {step: "check spec", setup: func(e *stepEnv, _ *state.Handle, be *fakeBackend) {
			be.caps.NoLink, be.caps.NoDial = "proxy only", "no descriptors"
			e.spec.Config.Approvals = config.Approvals{Mode: config.ApprovalsAsk}
			e.spec.Config.Ports = []string{"8000:8000"}
		}},
		"a published port in use": {step: "publish ports", prepared: true, setup: func(e *stepEnv, _ *state.Handle, be *fakeBackend) {
			be.caps.NoLink = "proxy only"
			e.spec.Config.Approvals = config.Approvals{Mode: config.ApprovalsAsk}
			e.spec.Config.Ports = []string{"8001", busy.Addr().String() + ":8000"} // the first binds, then is let go
		}},
		"the backend cannot start once registered": {step: "start backend", prepared: true, setup: func(e *stepEnv, _ *state.Handle, be *fakeBackend) {
			be.failStart = boom
			e.spec.Watch = true
		}},
		"a link the egress cannot take": {step: "attach link", prepared: true, started: true, setup: func(e *stepEnv, _ *state.Handle, be *fakeBackend) {
			be.caps.NoLink = "proxy only"
			be.link = true
			e.spec.Config.Approvals = config.Approvals{Mode: config.ApprovalsAsk}
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			e := newStepEnv(t)
			h, err := e.store.Create("")
			if err != nil {
				t.Fatal(err)
			}
			be := &fakeBackend{h: h}
			c.setup(e, h, be)
			first := &Command{Req: &proto.Exec{Argv: []string{"true"}}}
			s, err := start(context.Background(), h, e.spec, Options{First: first}, be)
			if err == nil {
				s.Close(false)
				t.Fatalf("start succeeded, want a failure at %s", c.step)
			}
			if want := "engine: " + c.step + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want it to start %q", err, want)
			}
			if left := e.left(t, h); len(left) > 0 {
				t.Errorf("a failed start left %q", left)
			}
			if c.prepared != (be.pending != nil) {
				t.Fatalf("prepared: %v, want %v", be.pending != nil, c.prepared)
			}
			// Prepared, it is closed once: by the engine, or by the backend's
			// failed start; started, the instance owns it.
			if want := 1; be.pending != nil && !c.started && be.pending.closed != want {
				t.Errorf("the prepared sandbox was closed %d times, want once", be.pending.closed)
			}
			if c.started != (be.inst != nil) {
				t.Fatalf("started: %v, want %v", be.inst != nil, c.started)
			}
			if be.inst != nil && be.inst.closed != 1 {
				t.Errorf("the instance was closed %d times, want once", be.inst.closed)
			}
		})
	}
}

// A bind sandbox the host will not keep leaves the state dir as its
// processes end, but its workspace session, which the review still reads;
// the control: one the host may keep stays listed until Close.
func TestStopLeavingTakesABindSandboxOutOfTheStateDirAtOnce(t *testing.T) {
	for _, leaving := range []bool{true, false} {
		e := newStepEnv(t)
		h, err := e.store.Reserve()
		if err != nil {
			t.Fatal(err)
		}
		s, err := start(context.Background(), h, e.spec, Options{}, &fakeBackend{h: h})
		if err != nil {
			t.Fatal(err)
		}
		s.Stop(leaving)
		entries, _ := e.store.List()
		if listed := len(entries) == 1; listed == leaving {
			t.Errorf("Stop(%v): listed %v", leaving, listed)
		}
		if _, err := s.Session().Finish(); err != nil {
			t.Errorf("Stop(%v): the review cannot read the session: %v", leaving, err)
		}
		if err := s.Close(false); err != nil {
			t.Fatal(err)
		}
		if left := e.left(t, h); len(left) > 0 {
			t.Errorf("Stop(%v), Close(false) left %q", leaving, left)
		}
	}
}

package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/guest"
	"github.com/airlock-dev/airlock/internal/guestbin"
	"github.com/airlock-dev/airlock/internal/link"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/subid"
	"github.com/airlock-dev/airlock/internal/timerslack"
	"github.com/airlock-dev/airlock/internal/trace"
)

// ErrClosed is returned for requests to a sandbox that has ended.
var ErrClosed = guestclient.ErrClosed

// setupTimeout bounds the guest's setup; it takes milliseconds.
const setupTimeout = 30 * time.Second

// Options are the host-side knobs that are not part of the sandbox's shape.
type Options struct {
	// Exe is the binary to run as the guest; by default the lean guest built
	// into this one (internal/guestbin), cached in GuestCache, else this
	// binary re-executed (/proc/self/exe).
	Exe string
	// GuestCache is a directory of the caller's that no sandbox sees, where
	// the lean guest is kept to be executed; "" re-executes this binary.
	GuestCache string
	Stderr     io.Writer // the guest's own diagnostics; default os.Stderr
	Env        func(string) string

	lean bool // Exe is the lean guest: this binary stands in if it cannot run
}

// Sandbox is one running native sandbox.
type Sandbox struct {
	ID       string
	warnings []string // what is not enforced here, for the user
	// tap is the sandbox's network interface, when Spec.Net asked for one:
	// the caller serves it (the gateway's netstack) and closes it.
	tap *os.File

	opts      Options
	limits    backend.Limits
	unlimited []string   // limits no cgroup enforces here (rlimits stand in)
	joined    chan error // the guest's move into its cgroup, done
	conn      *proto.Conn
	client    *guestclient.Client // requests to the guest, once it is ready
	first     *backend.Launched   // the first command given to Start
	guest     *guestProc
	cg        *cgroup.Group
	exited    chan struct{} // closed when the guest is reaped
	// ids, for root's sandboxes, holds their id slot and makes their
	// idmapped mounts; nil when the sandbox runs with the caller's ids.
	ids     *idmapper
	hostIDs bool

	closeOnce sync.Once
	mntns     int // the guest's mount namespace (see holdMounts); 0 if not held
}

// Start creates the sandbox and returns once its guest is ready for requests.
func Start(ctx context.Context, c *backend.Spec, o Options) (*Sandbox, error) {
	s, err := Spawn(o, c)
	if err != nil {
		return nil, err
	}
	if _, err := s.Start(ctx, c, nil, nil); err != nil {
		return nil, err
	}
	return s, nil
}

// Spawn starts the guest and puts it in a cgroup with c's limits, and
// returns at once: its namespaces exist and its runtime is starting
// (milliseconds) while the caller prepares the rest, then calls Start with
// the final spec. Only c.Limits and c.HostIDs are read here. Close ends a
// guest that is never started.
func Spawn(o Options, c *backend.Spec) (*Sandbox, error) {
	l := c.Limits
	leanOK := o.Exe == ""
	if o.Exe == "" {
		o.Exe = selfExe
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Env == nil {
		o.Env = os.Getenv
	}
	s := &Sandbox{opts: o, limits: l, hostIDs: c.HostIDs, exited: make(chan struct{}), joined: make(chan error, 1)}
	if os.Getuid() == 0 {
		if c.HostIDs {
			s.warnings = append(s.warnings, "running as host root ("+OptOut+"): root-owned files that are not hidden are readable inside, whatever their mode")
		} else {
			lease, err := acquireIDs()
			if err != nil {
				return nil, err
			}
			s.ids = &idmapper{lease: lease, exe: o.Exe}
			trace.Mark("native: id slot leased")
		}
	}
	conn, child, err := proto.Pair()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("native: %w", err)
	}
	s.conn = conn
	// The group is named by this process, as the guest's pid is not known
	// yet. cgroup v2: the guest is cloned straight into it, so it is made
	// first. v1 has no such clone: its group (a dir and limits in each
	// controller's hierarchy, ~1 ms) is made while the guest is cloned
	// (1.5-3 ms, on the other thread), and the guest moves itself into it
	// before its exec (spawnAttr.Join).
	var pl placement
	name := fmt.Sprintf("airlock-%d-%d", os.Getpid(), groupSeq.Add(1))
	unified := cgroup.Unified()
	made := make(chan struct{}) // closed once the group is made, or madeErr says why not
	var madeErr error
	if unified {
		if err := s.makeCgroup(name); err != nil {
			s.Close()
			return nil, err
		}
		if s.cg != nil {
			pl.into, _ = s.cg.OpenDir() // without it, the guest joins after its clone
		}
		close(made)
	} else {
		go func() {
			madeErr = s.makeCgroup(name)
			close(made)
		}()
		pl.join = func() []string {
			<-made
			if madeErr != nil || s.cg == nil {
				return nil
			}
			return s.cg.Paths()
		}
	}
	if leanOK {
		if lean := leanGuest(o.GuestCache); lean != nil {
			defer lean.Close() // the guest has it, once started
			o.Exe, o.lean = guestbin.Path(lean), true
		}
	}
	born, err := s.startGuest(o, child, pl)
	if pl.into != nil {
		pl.into.Close()
	}
	<-made
	if err == nil {
		err = madeErr
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	trace.Mark("native: guest cloned")
	s.joinCgroup(born)
	return s, nil
}

// groupSeq tells apart the groups of the sandboxes one process starts.
var groupSeq atomic.Uint64

// makeCgroup creates the sandbox's cgroup with its limits, or notes which
// limits go unenforced where no cgroup can be had.
func (s *Sandbox) makeCgroup(name string) error {
	l := s.limits
	cg, err := cgroup.New(name, cgroup.Limits{MemoryBytes: l.MemoryBytes, CPUs: l.CPUs, Pids: withGuestPids(l.Pids)})
	switch {
	case err == nil:
		s.cg, s.unlimited = cg, cg.Unenforced()
		for _, u := range s.unlimited {
			s.warnings = append(s.warnings, fmt.Sprintf("the %s limit is not enforced: no writable cgroup controller for it", u))
		}
	case errors.Is(err, cgroup.ErrUnavailable):
		// Unprivileged users without cgroup delegation: rlimits bound each
		// process's memory and the sandbox's process count instead.
		s.unlimited = []string{"memory", "pids", "cpu"}
		if l.CPUs > 0 {
			s.warnings = append(s.warnings, "--cpus is not enforced: no writable cgroup (run as root or delegate a cgroup v2 subtree to this user)")
		}
	default:
		return fmt.Errorf("native: cgroup: %w", err)
	}
	return nil
}

// joinCgroup moves the guest into its cgroup, unless it started there
// (placement), in the background: a move waits for an RCU grace period
// (up to ~20 ms on an idle machine), which so overlaps the guest's set-up.
// Start waits for it before it sends the first command: the guest starts
// nothing before an Exec.
func (s *Sandbox) joinCgroup(born bool) {
	if s.cg == nil || born {
		s.joined <- nil
		return
	}
	go func() {
		err := s.cg.Add(s.guest.Pid)
		trace.Mark("native: guest in its cgroup")
		s.joined <- err
	}()
}

// Start sends a spawned guest its plan and returns once the sandbox is ready.
// whileSetup, if set, runs while the guest builds the sandbox (milliseconds),
// with the cgroup dirs to record for crash cleanup; its error aborts the
// start. first, if set, follows the plan once whileSetup has returned: the
// guest reads it, as any exec, only once locked down, so it starts as the
// sandbox becomes ready, not a round trip after (First). On error the
// sandbox is closed.
func (s *Sandbox) Start(ctx context.Context, c *backend.Spec, whileSetup func(cgroupPaths []string) error, first *backend.Command) (_ backend.Instance, err error) {
	defer func() {
		if err != nil {
			s.Close()
			if s.tap != nil {
				s.tap.Close()
				s.tap = nil
			}
		}
	}()
	if c.Limits != s.limits || c.HostIDs != s.hostIDs {
		return nil, fmt.Errorf("native: start with limits %+v (host ids %v), but spawned with %+v (%v)", c.Limits, c.HostIDs, s.limits, s.hostIDs)
	}
	s.ID = c.ID
	if c.Overlay != nil && s.mntns != 0 {
		// Not with an overlay: its work dir, which the review deletes,
		// would stay busy while it is mounted.
		unix.Close(s.mntns)
		s.mntns = 0
	}
	init, err := Plan(c, s.opts.Env)
	if err != nil {
		return nil, fmt.Errorf("native: plan: %w", err)
	}
	init.Rlimits = rlimits(c.Limits, s.unlimited)
	if c.Limits.Pids > 0 {
		init.CommandPids = uint64(c.Limits.Pids)
	}
	trace.Mark("native: plan made")
	if s.ids != nil {
		if err := s.sendMounts(init); err != nil {
			return nil, err
		}
		trace.Mark("native: idmapped mounts sent")
	}
	// From here every message from the guest is routed: its Ready comes
	// unasked (ID 0), and the first command's replies under that request.
	client, setup, err := guestclient.Starting(s.conn)
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	if err := s.conn.Send(&proto.Msg{Op: proto.OpInit, Init: init}); err != nil {
		return nil, fmt.Errorf("native: send plan: %w", err)
	}
	trace.Mark("native: plan sent")
	if whileSetup != nil {
		if err := whileSetup(s.CgroupPaths()); err != nil {
			return nil, err
		}
		trace.Mark("native: registered while the guest sets up")
	}
	// The first command goes once the guest is in its cgroup: forked before
	// the move, it and all it starts would stay outside the limits (a v1
	// move takes one process, not its children). The move has mostly ended
	// by now; the guest sets up for milliseconds more. A failed move is
	// reported after the guest's own word: a guest that failed its set-up
	// is gone before it could be moved, and its message says why.
	joinErr := <-s.joined
	if joinErr == nil {
		trace.Mark("native: joined its cgroup")
		s.first = backend.Launch(client, first)
	}
	timer := time.NewTimer(setupTimeout)
	defer timer.Stop()
	select {
	case r, ok := <-setup:
		client.Done(0)
		trace.Mark("native: guest ready")
		m := r.Msg
		if !ok {
			m = &proto.Msg{Op: proto.OpError, Err: &proto.Error{Step: "start", Message: "the guest exited during setup (see its messages above)"}}
		}
		if m.Op == proto.OpReady && c.Net != nil && len(r.Files) == 1 {
			s.tap, r.Files = r.Files[0], nil
			persist(s.tap)
		}
		proto.CloseFiles(r.Files)
		if m.Op == proto.OpReady && c.Net != nil && s.tap == nil {
			return nil, errors.New("native: the guest made no network interface")
		}
		if m.Op != proto.OpReady {
			if m.Err == nil {
				m.Err = &proto.Error{Message: "unexpected " + m.Op.String()}
			}
			return nil, fmt.Errorf("native: sandbox setup: %w", m.Err)
		}
		if joinErr != nil {
			return nil, fmt.Errorf("native: join cgroup: %w", joinErr)
		}
		s.warnings = append(s.warnings, m.Warnings...)
	case <-ctx.Done():
		return nil, fmt.Errorf("native: sandbox setup: %w", ctx.Err())
	case <-timer.C:
		return nil, fmt.Errorf("native: sandbox setup took longer than %s", setupTimeout)
	}
	s.client = client
	return s, nil
}

// startGuest clones the guest in its namespaces, in its cgroup where pl
// says; born says whether it started there (CLONE_INTO_CGROUP needs clone3,
// Linux 5.7, and the v1 join the spawner: where either fails, the guest is
// started without it).
func (s *Sandbox) startGuest(o Options, sock *os.File, pl placement) (born bool, err error) {
	defer sock.Close()
	// try starts the guest with start, and again as os/exec did: with this
	// binary for a lean guest that is busy, and without the cgroup.
	exe := o.Exe
	try := func(start func(Options, string, *os.File, placement) (*guestProc, bool, error)) (*guestProc, bool, error) {
		g, born, err := start(o, exe, sock, pl)
		if errors.Is(err, syscall.ETXTBSY) && o.lean {
			// A lean guest cached this instant may still be open for writing in
			// a child its writer forked meanwhile: this binary will do.
			exe = selfExe
			g, born, err = start(o, exe, sock, pl)
		}
		if err != nil && (pl.into != nil || pl.join != nil) { // started without the cgroup, joined after
			g, _, err = start(o, exe, sock, placement{})
			return g, false, err
		}
		return g, born, err
	}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked exits, not the process:
		// keep this goroutine on its thread for the sandbox's whole life.
		runtime.LockOSThread()
		var g *guestProc
		var err error
		var ce *clone3Error
		if noSpawn.Load() {
			g, born, err = try(s.execGuest)
		} else if g, born, err = try(s.spawnGuest); errors.As(err, &ce) {
			// No clone3 (Linux < 5.3, or a seccomp filter refuses it), or
			// not with these flags: Go's fork decides, as it did.
			if ce.Err == syscall.ENOSYS {
				noSpawn.Store(true)
			}
			g, born, err = try(s.execGuest)
		}
		if err != nil {
			started <- err
			close(s.exited)
			return
		}
		s.guest = g
		s.holdMounts(g.Pid)
		started <- nil
		user, system := g.wait()
		if trace.On() {
			trace.Mark(fmt.Sprintf("native: guest reaped (its CPU: user %v, system %v)", user, system))
		}
		close(s.exited)
	}()
	if err := <-started; err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) {
			return false, fmt.Errorf("native: create namespaces: %w (user namespaces may be disabled: check sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces and kernel.apparmor_restrict_unprivileged_userns; `airlock doctor` tells)", err)
		}
		return false, fmt.Errorf("native: start guest: %w", err)
	}
	return born, nil
}

// placement is the cgroup a guest starts in: the v2 directory it is
// cloned into (CLONE_INTO_CGROUP), or, v1, the directories it moves itself
// into before its exec (spawnAttr.Join). Without either, or where the start
// cannot, it starts in this process's, and joinCgroup moves it.
type placement struct {
	into *os.File
	join func() []string
}

// guestProc is a started guest: wait reaps it and says what CPU it used.
type guestProc struct {
	Pid  int
	kill func() // SIGKILL, safe once reaped too
	wait func() (user, system time.Duration)
}

// guestFlags are the guest's namespaces.
const guestFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUTS | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// noSpawn is set once clone3 turned out to be missing (or spawn is not
// written for this architecture): os/exec starts the guests from then on.
var noSpawn atomic.Bool

// lastCap is the highest capability number this kernel knows.
var lastCap = sync.OnceValue(guest.LastCap)

// guestEnv is the guest's environment: its one P and the trace's switch.
func guestEnv() []string {
	// The guest runs on one P (guest.Main): set from its start, the runtime
	// makes no others, and the guest's own call to say so finds nothing to
	// change instead of stopping the world (~0.1 ms of the start).
	env := []string{"GOMAXPROCS=1"}
	if e := trace.ChildEnv(); e != "" {
		env = append(env, e)
	}
	return env
}

// idMaps are the guest's uid and gid maps. One uid and gid, the caller's
// own, on both sides: files the sandbox writes are the user's, and nobody
// else's identity exists inside. Root's sandbox: 0..65535 inside are its
// slot of airlock's range, it runs as 0 inside, and it keeps none of root's
// groups (their gids would still count): root says so.
func (s *Sandbox) idMaps() (uids, gids []syscall.SysProcIDMap, root bool) {
	if s.ids != nil {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(s.ids.lease.UID), Size: subid.SlotSize}},
			[]syscall.SysProcIDMap{{ContainerID: 0, HostID: int(s.ids.lease.GID), Size: subid.SlotSize}}, true
	}
	uid, gid := os.Getuid(), os.Getgid()
	return []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}, false
}

// spawnGuest starts the guest with spawn (no copy of this process's memory);
// its id maps are written while it waits, before its exec.
func (s *Sandbox) spawnGuest(o Options, exe string, sock *os.File, pl placement) (_ *guestProc, born bool, _ error) {
	uids, gids, root := s.idMaps()
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return nil, false, err
	}
	defer stdin.Close()
	stdout, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, false, err
	}
	defer stdout.Close()
	stderr, ok := o.Stderr.(*os.File)
	copied := make(chan struct{})
	if ok {
		close(copied)
	} else {
		// As os/exec does: a pipe, copied until every writer is gone.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, false, err
		}
		defer w.Close()
		stderr = w
		go func() {
			io.Copy(o.Stderr, r)
			r.Close()
			close(copied)
		}()
	}
	files := make([]int, guest.ControlFD+1)
	files[0], files[1], files[2] = int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd())
	files[guest.ControlFD] = int(sock.Fd())
	a := &spawnAttr{Path: exe, Argv: []string{"airlock", "guest"}, Env: guestEnv(), Files: files, Flags: guestFlags, Cgroup: -1,
		LastCap: lastCap(), SetIDs: root, Nofile: execNofile(), TimerSlack: timerslack.Relaxed,
		Maps: func(pid int) error { return writeIDMaps(pid, uids, gids, root) }}
	if pl.into != nil {
		a.Cgroup, born = int(pl.into.Fd()), true
	}
	if pl.join != nil {
		a.Join = func() []string {
			dirs := pl.join()
			born = len(dirs) > 0
			return dirs
		}
	}
	pid, pidfd, err := spawn(a)
	runtime.KeepAlive(sock)
	runtime.KeepAlive(pl.into)
	if err != nil {
		return nil, false, err // the pipe's write end is closed on return: the copy ends
	}
	// The pidfd names this child even once reaped, when its pid may be
	// another's: it is closed once nothing may signal it.
	var mu sync.Mutex
	return &guestProc{Pid: pid,
		kill: func() {
			mu.Lock()
			if pidfd >= 0 {
				unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			}
			mu.Unlock()
		},
		wait: func() (user, system time.Duration) {
			var ru unix.Rusage
			for {
				if _, err := unix.Wait4(pid, nil, 0, &ru); err != unix.EINTR {
					break
				}
			}
			mu.Lock()
			unix.Close(pidfd)
			pidfd = -1
			mu.Unlock()
			<-copied
			return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
		}}, born, nil
}

// writeIDMaps writes a child's id maps, as os/exec does; setgroups stays
// allowed only for root's sandbox, which drops its groups before its exec.
func writeIDMaps(pid int, uids, gids []syscall.SysProcIDMap, setgroups bool) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	write := func(name, data string) error {
		fd, err := unix.Open(dir+name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd, []byte(data))
			unix.Close(fd)
		}
		if err != nil {
			return fmt.Errorf("write the guest's %s: %w", name, err)
		}
		return nil
	}
	if !setgroups {
		if err := write("setgroups", "deny"); err != nil {
			return err
		}
	}
	if err := write("uid_map", formatIDMap(uids)); err != nil {
		return err
	}
	return write("gid_map", formatIDMap(gids))
}

func formatIDMap(m []syscall.SysProcIDMap) string {
	var b []byte
	for _, e := range m {
		b = fmt.Appendf(b, "%d %d %d\n", e.ContainerID, e.HostID, e.Size)
	}
	return string(b)
}

// execGuest starts the guest with os/exec, where spawn cannot: Go's fork,
// which copies this process's page tables for a child in a new user
// namespace, and sets the ids and maps before the exec.
func (s *Sandbox) execGuest(o Options, exe string, sock *os.File, pl placement) (*guestProc, bool, error) {
	uids, gids, root := s.idMaps()
	var cred *syscall.Credential
	if root {
		cred = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
	}
	caps := make([]uintptr, 0, 64)
	for c, last := 0, lastCap(); c <= last; c++ {
		caps = append(caps, uintptr(c))
	}
	cmd := exec.Command(exe, "guest")
	cmd.Args[0] = "airlock"
	cmd.Env = guestEnv()
	cmd.Stderr = o.Stderr
	cmd.ExtraFiles = make([]*os.File, guest.ControlFD-2)
	cmd.ExtraFiles[guest.ControlFD-3] = sock
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 guestFlags,
		UidMappings:                uids,
		GidMappings:                gids,
		GidMappingsEnableSetgroups: root,
		Credential:                 cred,
		// The guest needs its namespace's capabilities across exec to set up
		// mounts when it is not uid 0 inside; it drops them all before serving.
		AmbientCaps: caps,
		// If the supervisor dies, so does the guest, and with PID 1 gone the
		// kernel kills every process in the sandbox.
		Pdeathsig: syscall.SIGKILL,
	}
	if pl.into != nil { // a v1 group (pl.join) is joined after, by this process
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(pl.into.Fd())
	}
	if err := cmd.Start(); err != nil {
		return nil, false, err
	}
	return &guestProc{Pid: cmd.Process.Pid,
		kill: func() { cmd.Process.Signal(syscall.SIGKILL) },
		wait: func() (user, system time.Duration) {
			cmd.Wait()
			return cmd.ProcessState.UserTime(), cmd.ProcessState.SystemTime()
		}}, pl.into != nil, nil
}

// persist marks the sandbox's TAP device persistent, so that closing the
// host's descriptor, its last, does not unregister the device there and
// then: that waits for RCU grace periods (20 ms and more), and the
// supervisor's exit would wait for it. The device goes with its network
// namespace instead, which the kernel tears down in the background once
// the guest and this descriptor are gone (a tun device is never moved to
// the host's namespace: it is deleted with its own). Where the kernel
// refuses, the close is only slower.
func persist(tap *os.File) {
	if rc, err := tap.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { unix.IoctlSetInt(int(fd), unix.TUNSETPERSIST, 1) })
	}
}

// guestPids is what the sandbox's process limit leaves the guest beyond
// its commands' (proto.Init.CommandPids): the threads its Go runtime may
// make while the commands hold every slot they may (a fork bomb). The
// runtime dies when it cannot make one, and the sandbox with it. A guest
// runs ~7 threads, and one more for each file request in a blocking system
// call at that moment.
const guestPids = 32

// withGuestPids is the limit for the whole sandbox, the guest included,
// where its commands may have pids (0: none). The kernel counts a fork
// against RLIMIT_NPROC and pids.max before it refuses it, so while the
// commands' pids processes each try to fork, the count stands near twice
// pids for a moment; the guest's room is above that. Commands stay bound
// by their own limit (see the guest's forkExec).
func withGuestPids(pids int64) int64 {
	if pids <= 0 {
		return pids
	}
	return 2*pids + guestPids
}

// rlimits are the guest's, and so the most any command may raise its own
// to: RLIMIT_NPROC always (the sandbox's, commands have less: CommandPids),
// the others standing in for the cgroup limits listed in missing.
func rlimits(l backend.Limits, missing []string) []proto.Rlimit {
	out := []proto.Rlimit{{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0}}
	if l.Pids > 0 {
		n := uint64(withGuestPids(l.Pids))
		out = append(out, proto.Rlimit{Resource: unix.RLIMIT_NPROC, Cur: n, Max: n})
	}
	for _, m := range missing {
		switch {
		case m == "memory" && l.MemoryBytes > 0:
			// Per process, and only private writable memory: a stand-in, not a cgroup.
			out = append(out, proto.Rlimit{Resource: unix.RLIMIT_DATA, Cur: uint64(l.MemoryBytes), Max: uint64(l.MemoryBytes)})
		}
	}
	return out
}

// Process is a command running in the sandbox.
type Process = guestclient.Process

// Dial connects to port on the sandbox's loopback from inside (see
// backend.Dialer).
func (s *Sandbox) Dial(ctx context.Context, port uint16) (net.Conn, error) {
	return s.client.Dial(ctx, port)
}

// Call sends one file request and waits for its result.
func (s *Sandbox) Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error) {
	return s.client.Call(ctx, m)
}

// Exec starts req. In proto.StdioFDs mode, files are the process's stdin,
// stdout and stderr; in stream mode output goes to output as it arrives.
func (s *Sandbox) Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*Process, error) {
	return s.client.Exec(req, output, files...)
}

// First returns the first command given to Start once it has started.
func (s *Sandbox) First() (*Process, error) { return s.first.Wait() }

// Done is closed when the sandbox has ended.
func (s *Sandbox) Done() <-chan struct{} { return s.exited }

// GuestPID is the guest's pid on the host.
func (s *Sandbox) GuestPID() int {
	if s.guest == nil {
		return 0
	}
	return s.guest.Pid
}

// CgroupPaths lists the sandbox's cgroup dirs (for cleanup after a crash).
func (s *Sandbox) CgroupPaths() []string {
	if s.cg == nil {
		return nil
	}
	return s.cg.Paths()
}

// OOMKilled reports whether the memory limit killed a process.
func (s *Sandbox) OOMKilled() bool { return s.cg != nil && s.cg.OOMKilled() }

// Kill kills the guest (PID 1), so the kernel kills every process in the
// sandbox; it returns at once (Done is closed once the guest is reaped).
func (s *Sandbox) Kill() {
	if s.guest == nil {
		return
	}
	s.guest.kill()
}

// holdMounts opens the guest's mount namespace, to hold it across the
// guest's death: the last reference to it unmounts the sandbox's ~80
// mounts and waits for an RCU grace period, which the guest's exit, and so
// its reap, would otherwise wait for. Close drops it once the guest is
// reaped, beside what the host does then. Every process is gone by then:
// the mounts are reachable only through this descriptor, which nothing
// inherits. It is taken as the guest starts, before anything can reap it
// (its pid is its own) and before it can end itself (proto.Exec's Last).
func (s *Sandbox) holdMounts(pid int) {
	if fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		s.mntns = fd
	}
}

// Close ends the sandbox: the guest (PID 1) is killed, so the kernel kills
// every process in it; then its cgroup is removed. It is safe to call twice.
func (s *Sandbox) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.guest != nil {
			s.guest.kill()
			// The cgroup can only be removed once empty; without one there
			// is nothing to wait for: PID 1 is dead, so is every process,
			// and the goroutine that started the guest reaps it.
			if s.cg != nil || s.mntns != 0 {
				<-s.exited
			}
		}
		unmounted := make(chan struct{})
		if s.mntns != 0 {
			// The sandbox's mounts go now (see holdMounts), while the (empty)
			// cgroup is removed; the id slot is given back after.
			go func() { unix.Close(s.mntns); close(unmounted) }()
		} else {
			close(unmounted)
		}
		if s.conn != nil {
			s.conn.Close()
		}
		if s.cg != nil {
			err = s.cg.Destroy()
		}
		<-unmounted
		if s.ids != nil {
			// The slot is free again only once nothing runs as its ids.
			if s.guest != nil {
				<-s.exited
			}
			s.ids.close()
			s.ids.lease.Release()
		}
	})
	return err
}

// Warnings are what is not enforced here, for the user.
func (s *Sandbox) Warnings() []string { return s.warnings }

// Link is the sandbox's TAP device when Spec.Net asked for one: the caller
// serves it and closes it.
func (s *Sandbox) Link() *link.Link {
	if s.tap == nil {
		return nil
	}
	return &link.Link{Kind: link.TAP, File: s.tap}
}

// Backend runs sandboxes in namespaces on this kernel.
type Backend struct{ Options Options }

// Name is "native".
func (Backend) Name() string { return "native" }

// Caps: a TAP link where this user can make one; overlayfs inside; the
// guest is reaped only once every process in its PID namespace is gone.
func (Backend) Caps() backend.Caps {
	c := backend.Caps{ReapedWhenDone: true}
	if err := CanMakeTAP(); err != nil {
		c.NoLink = "no TAP device for this user: " + err.Error()
	}
	return c
}

// Prepare spawns the guest in its namespaces and cgroup; its runtime starts
// while the engine prepares the rest.
func (b Backend) Prepare(_ context.Context, spec *backend.Spec) (backend.Pending, error) {
	return Spawn(b.Options, spec)
}

// Prune has nothing to do: a native sandbox dies with its supervisor, and
// the state dir's sweep removes cgroups a killed one left.
func (Backend) Prune(context.Context, string, func(string) bool) ([]string, error) { return nil, nil }

// acquireIDs takes a free slot of airlock's id range, reserving the range
// first if there is none.
func acquireIDs() (*subid.Lease, error) {
	r, _, err := subid.DefaultPaths.Ensure()
	if err == nil {
		var lease *subid.Lease
		if lease, err = subid.DefaultPaths.Acquire(r); err == nil {
			return lease, nil
		}
	}
	return nil, fmt.Errorf("native: as root a sandbox runs as ids of its own from /etc/subuid and /etc/subgid, and none could be had (%v): run airlock doctor --fix, or pass %s to run as host root (unsafe)", err, OptOut)
}

// sendMounts makes root's sandbox's idmapped mounts and sends them ahead of
// its plan, MaxFDs to a message (see proto.OpMounts).
func (s *Sandbox) sendMounts(init *proto.Init) error {
	s.ids.guest = s.guest.Pid
	for _, d := range blindParents(init.Mounts) {
		init.Mounts = append(init.Mounts, proto.Mount{Kind: proto.MountTmpfs, Target: d, Mode: 0o755, ReadOnly: true, SizeBytes: 64 << 10})
	}
	sort.SliceStable(init.Mounts, func(i, j int) bool { return depth(init.Mounts[i].Target) < depth(init.Mounts[j].Target) })
	fds, warnings, err := s.ids.prepare(init)
	if err != nil {
		if errors.Is(err, ErrNoIDMap) {
			return fmt.Errorf("native: %v, which a sandbox run as root needs: use another directory, or pass %s to run as host root (unsafe)", err, OptOut)
		}
		return fmt.Errorf("native: idmapped mounts: %w", err)
	}
	s.warnings = append(s.warnings, warnings...)
	if init.Net != nil {
		// /dev/net/tun is root's (often mode 0600), and the sandbox no
		// longer is: the host opens it in the sandbox's network namespace,
		// where the device it makes will live.
		fd, err := openTunIn(s.guest.Pid)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return fmt.Errorf("native: open /dev/net/tun for the sandbox: %w", err)
		}
		fds = append(fds, fd)
		init.Net.FD = len(fds)
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "mount")
	}
	defer proto.CloseFiles(files)
	for len(files) > 0 {
		n := min(len(files), proto.MaxFDs)
		if err := s.conn.Send(&proto.Msg{Op: proto.OpMounts}, files[:n]...); err != nil {
			return fmt.Errorf("native: send mounts: %w", err)
		}
		proto.CloseFiles(files[:n])
		files = files[n:]
	}
	return nil
}

// openTunIn opens /dev/net/tun from the network namespace of process pid.
func openTunIn(pid int) (int, error) {
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(ns)
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(self)
	// setns changes this thread only; a thread that fails to come back is
	// never given back to the runtime (it exits with the goroutine).
	runtime.LockOSThread()
	if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return -1, err
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if unix.Setns(self, unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return fd, err
}

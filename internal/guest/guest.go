// Package guest is airlock's in-sandbox agent: the sandbox's PID 1. It builds
// the sandbox from the host's plan, locks itself down, then serves exec and
// file requests on the control channel until the host goes away.
package guest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/memtrim"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/timerslack"
	"github.com/airlock-dev/airlock/internal/trace"
)

// ControlFD is the descriptor on which the host hands the guest its control socket.
const ControlFD = 3

// ConnectFlag makes the guest dial its control socket at the path that
// follows instead of finding it on ControlFD: a container's entrypoint
// cannot inherit a descriptor, so the host listens on a socket in a
// directory it mounts into the container, and the guest (the container's
// first process) connects to it.
const ConnectFlag = "--connect"

// ListenFlag makes the guest accept its one control connection on the TCP
// address that follows, inside the sandbox (a Kubernetes Pod, which the
// host reaches by port-forward through the API server): the first to
// connect is the host, before any command runs, and the listener closes
// at once.
const ListenFlag = "--listen"

// InstallFlag makes the guest copy its own binary to the path that follows
// and exit: a Pod's init container puts airlock where the sandbox's own
// image has none.
const InstallFlag = "--install"

// Main runs the guest; it never returns.
func Main() {
	// One P: a native or container guest mostly waits (for requests, on
	// its children), and what it does, its set-up, is one goroutine's
	// work. With two, the runtime hands the P of each long mount call to
	// a new thread, which costs itself, competes with the host for the
	// CPUs, and joins each of the lockdown's four all-thread rounds: 7-9
	// threads at lockdown instead of 4-5. Runs back to back were 3-6%
	// slower so; in bench/startup.sh's mixed rounds, as fast. A VM's
	// guest (Serve) keeps them all for its file server.
	runtime.GOMAXPROCS(1)
	// Its sysmon then wakes with the timer interrupts, not every 0.1 ms, on
	// CPUs the host and the command share with it: 5% of a root run, 1% of
	// an unprivileged one. The native backend's spawner starts the guest
	// with the slack already (then this does nothing); os/exec's start and
	// a container's do not. Its commands get the default (runSpawner).
	timerslack.Relax()
	var args []string // after "airlock guest"
	if len(os.Args) > 2 {
		args = os.Args[2:]
	}
	if len(args) == 2 && args[0] == InstallFlag {
		if err := install(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "airlock guest: install:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	conn, err := control(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock guest:", err)
		os.Exit(1)
	}
	os.Exit(run(conn))
}

func control(args []string) (*proto.Conn, error) {
	if len(args) == 2 && args[0] == ConnectFlag {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: args[1], Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("connect to the host: %w", err)
		}
		return proto.NewConn(c), nil
	}
	if len(args) == 2 && args[0] == ListenFlag {
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			return nil, fmt.Errorf("listen for the host: %w", err)
		}
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return nil, fmt.Errorf("accept the host: %w", err)
		}
		return proto.StreamConn(c), nil
	}
	f := os.NewFile(ControlFD, "control")
	defer f.Close()
	c, err := proto.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("no control socket on descriptor %d (airlock starts the guest; it is not run by hand): %w", ControlFD, err)
	}
	return c, nil
}

// install copies this executable to dst, read and execute only.
func install(dst string) error {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	// The names airlock also answers to inside (see engine.BinInside).
	for _, name := range []string{"hostexec", "mcp-bridge"} {
		os.Symlink(filepath.Base(dst), filepath.Join(filepath.Dir(dst), name))
	}
	return nil
}

// Serve runs the guest on conn, which may be a StreamConn (a VM's
// virtio-serial port): it reads the plan, builds the sandbox, and serves
// until the host goes away. It returns the exit status for the process.
func Serve(conn *proto.Conn) int { return run(conn) }

func run(conn *proto.Conn) int {
	if err := ignoreSignals(); err != nil {
		fmt.Fprintln(os.Stderr, "airlock guest:", err)
		return 1
	}
	r := startReaper() // its spawner thread starts beside the set-up
	m, mounts, err := recvInit(conn)
	if err != nil {
		// The host closing before its plan is a start it abandoned (a
		// prepared sandbox whose spec was then refused): it has said why.
		if !errors.Is(err, io.EOF) {
			fmt.Fprintln(os.Stderr, "airlock guest: expected init message:", err)
		}
		return 1
	}
	trace.Mark("plan received")
	g := newGuest(conn, m.Init.Workdir, r)
	// PID 1 of a VM is its kernel's init, and a container's belongs to its
	// runtime: only a native guest's exit is the sandbox's plain end.
	g.mayEnd = m.Init.VM == nil && !m.Init.Contained
	r.commandPids = m.Init.CommandPids
	tap, warnings, err := setup(m.Init, mounts, g.reaper)
	trace.MarkCPU("sandbox built")
	proto.CloseFiles(mounts)
	if err != nil {
		perr := &proto.Error{Message: err.Error()}
		var se *stepError
		if errors.As(err, &se) {
			perr.Step, perr.Message = se.step, se.err.Error()
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			perr.Errno = int(errno)
		}
		conn.Send(&proto.Msg{Op: proto.OpError, Err: perr})
		return 1
	}
	if m.Init.CommandPids == 0 {
		// The spare threads are made once locked down, which they inherit:
		// made before, each would be one more thread for the lockdown's
		// all-thread rounds (Landlock and capabilities: ~2% of a run).
		<-makeSpareThreads(spareThreads)
	}
	// Locked down, with its threads: requests are served from here on,
	// beside saying so rather than after (a run's command may be waiting
	// behind the plan already).
	served := make(chan struct{})
	go func() {
		defer close(served)
		g.serve()
	}()
	var files []*os.File
	if tap != nil {
		files = append(files, tap)
	}
	err = conn.Send(&proto.Msg{Op: proto.OpReady, Warnings: warnings}, files...)
	close(g.readySent)
	proto.CloseFiles(files) // the host has its own copy now
	if err != nil {
		return 1
	}
	<-served
	return 0
}

// spareThreads is how many idle OS threads the guest makes before it says
// it is ready, where its commands share its process limit (no
// proto.Init.CommandPids: a container's pids limit, a VM). The Go runtime
// makes a thread when a goroutine blocks in a system call and another must
// run; a fork bomb that fills the sandbox's process limit (its cgroup's
// pids.max, or RLIMIT_NPROC without one: both count threads) leaves no
// room for one, and the runtime dies for want of it ("newosproc"), PID 1
// with it, instead of the sandbox timing out. The runtime keeps idle
// threads and reuses them first. Making them and their ends cost a native
// run ~5%, which a limit of the commands' own avoids.
const spareThreads = 8

// makeSpareThreads leaves n more idle threads with the runtime, made in the
// background; the channel is closed when they exist.
func makeSpareThreads(n int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var locked sync.WaitGroup
		release := make(chan struct{})
		for range n {
			locked.Add(1)
			go func() {
				runtime.LockOSThread() // a thread no other goroutine may take
				locked.Done()
				<-release
				runtime.UnlockOSThread() // returned idle, not ended, as this one exits unlocked
			}()
		}
		locked.Wait()
		close(release)
	}()
	return done
}

// maxMounts bounds the descriptors the host may send ahead of Init.
const maxMounts = 1024

// recvInit reads the plan, and the mounts the host made for it before it
// (proto.OpMounts).
func recvInit(conn *proto.Conn) (*proto.Msg, []*os.File, error) {
	var mounts []*os.File
	for {
		m, files, err := conn.Recv()
		if err == nil && m.Op == proto.OpMounts && len(mounts)+len(files) <= maxMounts {
			mounts = append(mounts, files...)
			continue
		}
		proto.CloseFiles(files)
		if err == nil && (m.Op != proto.OpInit || m.Init == nil) {
			err = fmt.Errorf("got %s", m.Op)
		}
		if err != nil {
			proto.CloseFiles(mounts)
			return nil, nil, err
		}
		return m, mounts, nil
	}
}

// setup builds the sandbox and locks the guest down; tap is the network
// interface's descriptor for the host when in.Net asked for one. mounts are
// the ones the host made (Mount.FD).
func setup(in *proto.Init, mounts []*os.File, r *reaper) (tap *os.File, warnings []string, err error) {
	if in.VM != nil {
		warnings, err = setupVM(in, r)
		return nil, warnings, err
	}
	if in.Contained {
		warnings, err = setupContained(in, r)
		return nil, warnings, err
	}
	defer func() {
		if err != nil && tap != nil {
			tap.Close()
			tap = nil
		}
	}()
	if in.Net != nil {
		if tap, err = makeTAP(in.Net, mounts); err != nil {
			return nil, nil, err
		}
	}
	detached, err := buildRoot(in, mounts)
	if err != nil {
		return tap, nil, err
	}
	trace.Mark("root built")
	// While the old root is detached (see pivot), work that resolves no
	// path: the host name and the loopback are the namespaces' own.
	if err := unix.Sethostname([]byte(in.Hostname)); err != nil {
		return tap, nil, step("sethostname", err)
	}
	if err := loopbackUp(); err != nil {
		return tap, nil, step("loopback up", err)
	}
	if err := <-detached; err != nil {
		return tap, nil, err
	}
	if in.Relay != nil {
		if err := startRelay(in.Relay); err != nil {
			return tap, nil, step("gateway relay", err)
		}
	}
	if err := os.Chdir(in.Workdir); err != nil {
		return tap, nil, step("chdir to workspace", err)
	}
	trace.Mark("namespaces set up")
	warnings, err = lockDown(in, r)
	return tap, warnings, err
}

// setupContained finishes a sandbox a container runtime built: the relay,
// the workspace, and the lockdown that needs no capability.
func setupContained(in *proto.Init, r *reaper) ([]string, error) {
	if in.Unplug {
		if err := unplug(); err != nil {
			return nil, step("remove the network interfaces", err)
		}
	}
	for _, f := range in.Files {
		if err := writeFile(f); err != nil {
			return nil, step("write "+f.Path, err)
		}
	}
	if in.Relay != nil {
		if err := startRelay(in.Relay); err != nil {
			return nil, step("gateway relay", err)
		}
	}
	if err := os.Chdir(in.Workdir); err != nil {
		return nil, step("chdir to workspace", err)
	}
	return lockDown(in, r)
}

// writeFile writes one of the plan's files, read-only, making its
// directory.
func writeFile(f proto.File) error {
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(f.Path, f.Data, 0o444)
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// idleTrim is how long the guest waits without a request before it gives
// back the memory it does not need (see memtrim): a sandbox spends most of
// its life waiting for its commands.
const idleTrim = 2 * time.Second

// guest serves one control connection.
type guest struct {
	conn      *proto.Conn
	workdir   string
	reaper    *reaper
	mayEnd    bool          // the guest may end the sandbox itself after a Last process (proto.Exec)
	readySent chan struct{} // closed once Ready is sent (or failed): the guest may end only after

	mu    sync.Mutex
	procs map[uint32]*process // by request ID
}

func newGuest(conn *proto.Conn, workdir string, r *reaper) *guest {
	return &guest{conn: conn, workdir: workdir, reaper: r, readySent: make(chan struct{}), procs: map[uint32]*process{}}
}

// endingSignals are those whose Go default would end the guest and that are
// not faults of its own (a fault must reach the runtime's handler). Every
// other signal the runtime catches and drops by default: SIGUSR1, SIGUSR2
// and SIGPIPE from kill(2) among them.
var endingSignals = []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGABRT, syscall.SIGTERM}

// ignoreSignals makes the guest ignore endingSignals: as PID 1 it gets only
// the signals it has a disposition for, and a process in the sandbox must not
// end the sandbox with kill(1, SIGTERM). The dispositions are set by
// rt_sigaction directly, not by os/signal: signal.Ignore would mark them
// ignored for the runtime too, whose fork then leaves them ignored in every
// command, and signal.Notify costs a round trip with the runtime's signal
// thread per signal (~0.5 ms with that thread's start, on a run's critical
// path). The runtime still counts them as its own, so the child of each
// fork sets them back to the default before it execs the command
// (syscall.ForkExec); TestSignalsToPID1AreIgnoredAndNotInherited checks
// both. The exception is a SIGHUP or SIGINT the guest was started with
// ignored (nohup, a shell's background job): the runtime leaves those alone,
// so the commands inherit them ignored, as any Unix process's children do.
func ignoreSignals() error {
	ignore := sigaction{handler: 1} // SIG_IGN
	for _, sig := range endingSignals {
		_, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&ignore)), 0, unsafe.Sizeof(ignore.mask), 0, 0)
		if e != 0 {
			return fmt.Errorf("ignore %v: %w", sig, e)
		}
	}
	return nil
}

// sigaction is the kernel's struct sigaction on amd64 and arm64.
type sigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

func (g *guest) serve() {
	idle := memtrim.AfterIdle(idleTrim)
	defer idle.Stop()
	for {
		m, files, err := g.conn.Recv()
		idle.Touch()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintln(os.Stderr, "airlock guest: control channel:", err)
			}
			return // the host is gone: PID 1 exits and the kernel ends the sandbox
		}
		g.handle(m, files)
	}
}

func (g *guest) reply(m *proto.Msg, files ...*os.File) {
	if err := g.conn.Send(m, files...); err != nil {
		fmt.Fprintln(os.Stderr, "airlock guest: reply:", err)
	}
}

func (g *guest) fail(id uint32, stepName string, err error) {
	e := &proto.Error{Step: stepName, Message: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		e.Errno = int(errno)
	}
	g.reply(&proto.Msg{ID: id, Op: proto.OpError, Err: e})
}

func (g *guest) handle(m *proto.Msg, files []*os.File) {
	switch m.Op {
	case proto.OpExec:
		trace.Mark("exec: request received")
		if m.Exec == nil || len(m.Exec.Argv) == 0 {
			proto.CloseFiles(files)
			g.fail(m.ID, "exec", errors.New("empty command"))
			return
		}
		if m.Exec.Stdio == proto.StdioFDs && !g.conn.PassesFiles() {
			g.fail(m.ID, "exec", errors.New("fd stdio needs a channel that carries descriptors: the host relays them as a stream"))
			return
		}
		go g.exec(m.ID, m.Exec, files)
		return
	case proto.OpDial:
		proto.CloseFiles(files)
		go g.dial(m.ID, m.Port)
		return
	case proto.OpStdin, proto.OpStdinClose, proto.OpSignal, proto.OpResize:
		proto.CloseFiles(files)
		g.mu.Lock()
		p := g.procs[m.ID]
		g.mu.Unlock()
		if p == nil {
			return // the process is gone; late input is dropped
		}
		p.control(m)
		return
	}
	proto.CloseFiles(files)
	go func() {
		res, err := g.file(m)
		if err != nil {
			g.fail(m.ID, m.Op.String(), err)
			return
		}
		res.ID, res.Op = m.ID, proto.OpResult
		g.reply(res)
	}()
}

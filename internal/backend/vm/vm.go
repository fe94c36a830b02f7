// Package vm runs sandboxes in QEMU micro-VMs: the airlock binary boots as
// the guest's /init from an initramfs, the root is a read-only image on
// virtio-blk, the guest agent speaks the usual protocol over a virtio-serial
// port, and the guest's virtio-net frames travel over a datagram socketpair
// into the host's netstack. QEMU itself runs confined (see jail.go).
package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/guest"
	"github.com/airlock-dev/airlock/internal/link"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/vfs"
)

// Boot bounds: TCG boots in about 2 s here; the KVM probe must answer fast
// or KVM is not usable (a nested host can pass the ioctls and still hang).
const (
	bootTimeout  = 60 * time.Second
	probeTimeout = 5 * time.Second
	// initTimeout bounds the kernel's part of a boot, up to starting /init:
	// about 2 s under TCG here, 3 s with both CPUs busy. An emulated boot
	// that stalls there is booted once more.
	initTimeout = 20 * time.Second
	// maxFileBytes bounds one host file sent into the VM (the CA bundle).
	maxFileBytes = 4 << 20
)

// PIDFile is where a sandbox's QEMU pid is recorded, in its RunDir.
const PIDFile = "qemu.pid"

// ConsoleFile is the guest console's log, in the sandbox's RunDir.
const ConsoleFile = "console.log"

// Options are the host-side knobs that are not part of a sandbox's shape.
type Options struct {
	Exe     string // the static airlock binary booted as /init; default this executable
	DataDir string // where the images, the initrd cache and the KVM verdict live
	Env     func(string) string
	Stderr  io.Writer // the one warning about TCG goes here
	// Assets finds the kernel, modules and root image; default FindAssets.
	Assets func(dataDir string) (Assets, error)
	// BootTimeout bounds a start from the plan sent to ready (default 60 s).
	BootTimeout time.Duration
}

func (o *Options) defaults() {
	if o.Exe == "" {
		o.Exe = "/proc/self/exe"
	}
	if o.Env == nil {
		o.Env = os.Getenv
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Assets == nil {
		o.Assets = FindAssets
	}
	if o.BootTimeout <= 0 {
		o.BootTimeout = bootTimeout
	}
}

// Backend runs sandboxes in QEMU VMs.
type Backend struct{ Options Options }

// Name is "vm".
func (Backend) Name() string { return "vm" }

// Caps: a datagram network link always; an overlay workspace (layered on
// the host by the file service); QEMU's exit means every guest process is
// gone.
func (Backend) Caps() backend.Caps {
	return backend.Caps{ReapedWhenDone: true, UsesRunDir: true,
		NoDial: "a VM's control channel carries no descriptors, so a published port goes through its network interface: use --network-mode transparent (the default)"}
}

// Prepare boots the VM now, so its boot (seconds under TCG) overlaps the
// engine's own preparation; Start sends the plan.
func (b Backend) Prepare(ctx context.Context, spec *backend.Spec) (backend.Pending, error) {
	o := b.Options
	o.defaults()
	accel, warning := chooseAccel(ctx, o)
	s, err := boot(o, spec.Limits, accel)
	if err != nil {
		return nil, err
	}
	if warning != "" {
		s.warnings = append(s.warnings, warning)
	}
	return s, nil
}

// Prune kills the QEMU of every sandbox under stateRoot that is not running.
func (Backend) Prune(_ context.Context, stateRoot string, running func(id string) bool) ([]string, error) {
	return Prune(stateRoot, running)
}

// Sandbox is one VM.
type Sandbox struct {
	opts     Options
	accel    Accel
	limits   backend.Limits
	qemuPath string
	assets   Assets
	initrd   string
	qemu     *os.Process
	exited   chan struct{} // closed when QEMU is reaped
	qemuEnd  string        // how QEMU ended ("signal: killed"), set before exited is closed
	conn     *proto.Conn
	ctl      *os.File // conn's socket: a stalled boot's diagnosis reads its queue
	client   *guestclient.Client
	first    *backend.Launched // the first command given to Start
	net      *os.File          // the host's end of the network socketpair
	cg       *cgroup.Group
	vfsPort  *os.File    // the host's end of the VFS port, until served
	shares   *vfs.Router // what the VFS port serves
	stopVFS  context.CancelFunc
	vfsDone  chan struct{} // closed when the VFS server has returned
	closers  []func() error
	console  *console
	pidFile  string
	warnings []string

	closeOnce sync.Once
}

// boot starts QEMU with the guest booting; the guest then waits for its plan.
func boot(o Options, l backend.Limits, accel Accel) (_ *Sandbox, err error) {
	qemu, err := FindQEMU(o.Env)
	if err != nil {
		return nil, err
	}
	a, err := o.Assets(o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := backend.CheckStatic("vm", o.Exe); err != nil {
		return nil, err
	}
	initrd, err := Initrd(o.DataDir, a, o.Exe)
	if err != nil {
		return nil, fmt.Errorf("vm: initrd: %w", err)
	}
	s := &Sandbox{opts: o, accel: accel, limits: l, qemuPath: qemu, assets: a, initrd: initrd}
	if err := s.launch(); err != nil {
		s.Close()
		return nil, err
	}
	s.limit(memMiB(l), l)
	return s, nil
}

// launch starts QEMU on fresh sockets: the console, the control and VFS
// ports and the network.
func (s *Sandbox) launch() error {
	s.exited = make(chan struct{})
	var closers []*os.File // the descriptors QEMU inherits, ours to close once it has them
	defer func() {
		for _, f := range closers {
			f.Close()
		}
	}()
	var files []*os.File
	bootFiles := []string{s.assets.Kernel, s.initrd, s.assets.Root}
	for _, p := range bootFiles {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("vm: %w", err)
		}
		closers, files = append(closers, f), append(files, f)
	}
	pair := func(typ int, name string) (*os.File, error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("vm: %s socketpair: %w", name, err)
		}
		theirs := os.NewFile(uintptr(fds[1]), name+"-qemu")
		closers, files = append(closers, theirs), append(files, theirs)
		if typ == unix.SOCK_STREAM {
			// Ours is polled by the runtime, so closing it ends a blocked
			// Read (proto.StreamConn and the VFS server rely on that).
			if err := unix.SetNonblock(fds[0], true); err != nil {
				unix.Close(fds[0])
				return nil, fmt.Errorf("vm: %s socket: %w", name, err)
			}
		}
		return os.NewFile(uintptr(fds[0]), name), nil
	}
	con, err := pair(unix.SOCK_STREAM, "console")
	if err != nil {
		return err
	}
	s.console = newConsole(con)
	ctl, err := pair(unix.SOCK_STREAM, "control")
	if err != nil {
		return err
	}
	// The guest's end is a port: no descriptors cross, on either side.
	s.ctl, s.conn = ctl, proto.StreamConn(ctl)
	if s.net, err = pair(unix.SOCK_DGRAM, "net"); err != nil {
		return err
	}
	if s.vfsPort, err = pair(unix.SOCK_STREAM, "vfs"); err != nil {
		return err
	}
	fd := func(i int) string { return "/proc/self/fd/" + strconv.Itoa(3+i) }
	m := Machine{
		Name: "airlock-vm", Accel: s.accel, MemMiB: memMiB(s.limits), CPUs: cpus(s.limits),
		Kernel: fd(0), Initrd: fd(1), Root: fd(2), RootFS: s.assets.RootFormat,
		ConsoleFD: 6, CtlFD: 7, NetFD: 8, VFSFD: 9,
	}
	return s.start(s.qemuPath, Args(m), files, bootFiles)
}

// qemuOverhead is QEMU's own memory beside the guest's: its code, devices
// and TCG's translation cache.
const qemuOverhead = (256 + tbMiB) << 20

// limit puts QEMU in a cgroup: the guest's memory plus QEMU's overhead,
// the CPUs asked for, and a bound on its threads. Where no cgroup can be
// made the VM's own size still bounds the guest, and a warning says so.
func (s *Sandbox) limit(memMiB int, l backend.Limits) {
	cg, err := cgroup.New(fmt.Sprintf("airlock-vm-%d", s.qemu.Pid), cgroup.Limits{MemoryBytes: int64(memMiB)<<20 + qemuOverhead, CPUs: l.CPUs, Pids: 512})
	if err == nil {
		err = cg.Add(s.qemu.Pid)
		if err != nil {
			cg.Destroy()
		}
	}
	if err != nil {
		s.warnings = append(s.warnings, "QEMU runs without a cgroup ("+err.Error()+"): only the VM's size bounds its memory, and --cpus is not enforced")
		return
	}
	s.cg = cg
	for _, u := range cg.Unenforced() {
		s.warnings = append(s.warnings, fmt.Sprintf("the %s limit on QEMU is not enforced: no writable cgroup controller for it", u))
	}
}

// start runs QEMU in its jail, on a thread kept for its life: Pdeathsig
// fires when the thread that forked it exits.
func (s *Sandbox) start(qemu string, args []string, files []*os.File, bootFiles []string) error {
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread (Landlocked below) ends with QEMU.
		runtime.LockOSThread()
		switch err := landlockThread(qemu, bootFiles); {
		case errors.Is(err, errNoLandlock):
			s.warnings = append(s.warnings, "QEMU is not confined by Landlock: the host kernel lacks it")
		case err != nil:
			started <- fmt.Errorf("confine QEMU: %w", err)
			close(s.exited)
			return
		}
		cmd := jailed(qemu, args, files, files[3]) // QEMU's own errors land on the console
		if err := cmd.Start(); err != nil {
			started <- err
			close(s.exited)
			return
		}
		s.qemu = cmd.Process
		started <- nil
		cmd.Wait()
		s.qemuEnd = cmd.ProcessState.String()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("vm: start QEMU: %w", err)
	}
	return nil
}

func memMiB(l backend.Limits) int {
	if l.MemoryBytes <= 0 {
		return 1024
	}
	return int(min(max(l.MemoryBytes>>20, 256), 16<<10))
}

func cpus(l backend.Limits) int {
	n := runtime.NumCPU()
	if l.CPUs > 0 {
		n = min(n, int(l.CPUs+0.999))
	}
	return max(n, 1)
}

// Start records QEMU's pid, sends the guest its plan and waits until it is
// ready; then it Execs the first command, if any. On error the VM is gone.
func (s *Sandbox) Start(ctx context.Context, spec *backend.Spec, register func(cgroups []string) error, first *backend.Command) (_ backend.Instance, err error) {
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.record(spec); err != nil {
		return nil, err
	}
	if register != nil {
		var paths []string
		if s.cg != nil {
			paths = s.cg.Paths()
		}
		if err := register(paths); err != nil {
			return nil, err
		}
	}
	in, err := plan(spec)
	if err != nil {
		return nil, err
	}
	if err := s.serveShares(spec, in); err != nil {
		return nil, err
	}
	s.dropNet(spec)
	// The kernel's part has its own, shorter bound (half a short timeout):
	// a boot that stalls there is tried again.
	initWait := min(initTimeout, s.opts.BootTimeout/2)
	err = s.handshake(ctx, in, s.opts.BootTimeout, initWait)
	if errors.Is(err, errNoInit) {
		// An emulated boot can stall in the kernel, rarely and silently
		// (QEMU's or the kernel's doing, not the guest's): boot once more,
		// and say so.
		s.warnings = append(s.warnings, withoutConsole(err)+"; booted it again")
		if err := s.reboot(spec); err != nil {
			return nil, err
		}
		err = s.handshake(ctx, in, s.opts.BootTimeout, initWait)
	}
	if err != nil {
		return nil, err
	}
	s.first = backend.Launch(s.client, first)
	return s, nil
}

// record saves the console and QEMU's pid in the run dir.
func (s *Sandbox) record(spec *backend.Spec) error {
	if spec.RunDir == "" {
		return nil
	}
	if err := os.MkdirAll(spec.RunDir, 0o700); err != nil {
		return fmt.Errorf("vm: %w", err)
	}
	s.console.saveTo(filepath.Join(spec.RunDir, ConsoleFile))
	s.pidFile = filepath.Join(spec.RunDir, PIDFile)
	if err := os.WriteFile(s.pidFile, []byte(strconv.Itoa(s.qemu.Pid)+"\n"), 0o600); err != nil {
		return fmt.Errorf("vm: record QEMU's pid: %w", err)
	}
	return nil
}

// dropNet closes the network link of a sandbox that has no network.
func (s *Sandbox) dropNet(spec *backend.Spec) {
	if spec.Net == nil {
		s.net.Close()
		s.net = nil
	}
}

// reboot replaces a QEMU whose kernel stalled before /init with a fresh
// one, in the same cgroup and run dir, serving the same shares.
func (s *Sandbox) reboot(spec *backend.Spec) error {
	s.endQEMU()
	s.qemu = nil // launch may fail before it starts another: nothing left to kill
	if err := s.launch(); err != nil {
		return err
	}
	if s.cg != nil {
		if err := s.cg.Add(s.qemu.Pid); err != nil {
			return fmt.Errorf("vm: cgroup: %w", err)
		}
	}
	s.dropNet(spec)
	s.serveVFS()
	return s.record(spec)
}

// First returns the first command given to Start once it has started.
func (s *Sandbox) First() (*guestclient.Process, error) { return s.first.Wait() }

// serveShares serves the sandbox's host directories on the VFS port.
func (s *Sandbox) serveShares(spec *backend.Spec, in *proto.Init) error {
	root, tops, closers, err := shares(spec, s.opts.Env)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, closers...)
	in.VM.Shares = tops
	s.shares = root
	s.serveVFS()
	return nil
}

// serveVFS serves s.shares on the VFS port of the running QEMU.
func (s *Sandbox) serveVFS() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopVFS = cancel
	port, root := s.vfsPort, s.shares
	s.vfsPort = nil
	done := make(chan struct{})
	s.vfsDone = done
	go func() {
		defer close(done)
		// The guest runs its commands as root: it owns what it is shown, and
		// what it creates is the host user's.
		if err := vfs.ServeStream(ctx, port, root, vfs.ServeOptions{Owner: &vfs.Owner{}}); err != nil && ctx.Err() == nil {
			fmt.Fprintf(s.opts.Stderr, "airlock: the VM's file service ended: %v\n", err)
		}
	}()
}

// handshake sends the plan and waits for Ready, QEMU's exit or the timeout;
// initWait, if set, bounds the kernel's part alone (errNoInit).
func (s *Sandbox) handshake(ctx context.Context, in *proto.Init, timeout, initWait time.Duration) error {
	ready := make(chan *proto.Msg, 1)
	go func() {
		if err := s.conn.Send(&proto.Msg{Op: proto.OpInit, Init: in}); err != nil {
			ready <- &proto.Msg{Op: proto.OpError, Err: &proto.Error{Step: "send plan", Message: err.Error()}}
			return
		}
		m, files, err := s.conn.Recv()
		proto.CloseFiles(files)
		if err != nil {
			m = &proto.Msg{Op: proto.OpError, Err: &proto.Error{Step: "boot", Message: "the control channel broke: " + err.Error()}}
		}
		ready <- m
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var initTimer <-chan time.Time
	started := s.console.initStarted
	if initWait > 0 {
		t := time.NewTimer(initWait)
		defer t.Stop()
		initTimer = t.C
	}
	for {
		select {
		case <-started:
			started, initTimer = nil, nil
		case <-initTimer:
			return s.bootError(fmt.Errorf("vm: %w within %s (%s)", errNoInit, initWait, s.accel))
		case m := <-ready:
			if m.Op == proto.OpReady {
				s.warnings = append(s.warnings, m.Warnings...)
				s.client = guestclient.New(s.conn)
				return nil
			}
			if m.Err == nil {
				m.Err = &proto.Error{Step: "boot", Message: "the guest sent " + m.Op.String() + " instead of ready"}
			}
			return s.bootError(fmt.Errorf("vm: sandbox setup: %w", m.Err))
		case <-s.exited:
			return s.bootError(errors.New("vm: QEMU exited before the guest was ready"))
		case <-ctx.Done():
			return fmt.Errorf("vm: sandbox setup: %w", ctx.Err())
		case <-timer.C:
			return s.bootError(fmt.Errorf("vm: the guest was not ready within %s (%s): %s", timeout, s.accel, s.stalled()))
		}
	}
}

// errNoInit is a boot whose kernel never started the guest's /init.
var errNoInit = errors.New("the VM's kernel did not start airlock's init")

// stalled says how far a boot that timed out got: whether the guest took
// its plan off the control port (QEMU reads the port's socket only once the
// guest has opened it), and whether QEMU was computing or waiting.
func (s *Sandbox) stalled() string {
	var why []string
	if rc, err := s.ctl.SyscallConn(); err == nil {
		queued, qerr := 0, error(nil)
		rc.Control(func(fd uintptr) { queued, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		switch {
		case qerr != nil:
		case queued > 0:
			why = append(why, "its plan was never read (the guest's init did not open its control port)")
		default:
			why = append(why, "it had read its plan, so its set-up stalled")
		}
	}
	if cpu, err := cpuSeconds(s.qemu.Pid); err == nil {
		why = append(why, fmt.Sprintf("QEMU had used %.1f s of CPU", cpu))
	}
	if len(why) == 0 {
		return "no further detail"
	}
	return strings.Join(why, "; ")
}

// cpuSeconds is the user and system time process pid has used.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The fields after the command name (which may hold spaces or
	// parentheses): utime and stime are the 12th and 13th, in clock ticks,
	// which Linux reports to user space at 100 Hz.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	rest := b[i+1:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	k, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(u+k) / 100, nil
}

// bootError adds how QEMU ended, if it ended by itself (a broken control
// channel is often its end, seen first), and the console's last lines,
// which say why a boot failed. A QEMU killed with nothing on its console
// was killed from outside (the OOM killer, a signal).
func (s *Sandbox) bootError(err error) error {
	select {
	case <-s.exited:
		err = fmt.Errorf("%w (QEMU ended: %s)", err, s.qemuEnd)
	case <-time.After(qemuEndWait):
	}
	s.kill()
	if tail := s.console.tail(); tail != "" {
		return fmt.Errorf("%w"+consoleTail+":\n%s", err, tail)
	}
	return err
}

// qemuEndWait is how long a failed boot waits for QEMU to end by itself
// before it is killed, to say how it ended.
const qemuEndWait = 200 * time.Millisecond

// consoleTail introduces the console's lines in a boot error.
const consoleTail = "; the console's last lines"

// withoutConsole is a boot error's first part, for a one-line message.
func withoutConsole(err error) string {
	msg, _, _ := strings.Cut(err.Error(), consoleTail)
	return msg
}

// plan is what the guest does before serving: the sandbox's directories,
// the host files it would bind (their content here), the network, Landlock.
func plan(spec *backend.Spec) (*proto.Init, error) {
	in := &proto.Init{
		Hostname: backend.Hostname(spec.ID), Workdir: spec.Workspace, Landlock: backend.Landlock(spec),
		Seccomp: true, Net: spec.Net, Relay: spec.Relay, VM: &proto.VM{},
	}
	in.VM.Dirs = append(in.VM.Dirs, spec.Workspace, backend.SandboxHome(spec.HostHome))
	in.VM.Dirs = append(in.VM.Dirs, spec.RW...)
	for _, b := range spec.Binds {
		in.VM.Dirs = append(in.VM.Dirs, b.Target)
	}
	total := 0
	for _, f := range spec.Files {
		st, err := os.Stat(f.Source)
		if err != nil {
			return nil, fmt.Errorf("vm: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue // a socket (the proxy door) cannot cross into a VM; the link replaces it
		}
		if st.Size() > maxFileBytes || total+int(st.Size()) > proto.MaxFrame/2 {
			return nil, fmt.Errorf("vm: %s is too large to send into the VM", f.Source)
		}
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("vm: %w", err)
		}
		total += len(b)
		in.VM.Files = append(in.VM.Files, proto.File{Path: f.Target, Data: b})
	}
	if spec.Relay != nil {
		return nil, errors.New("vm: the proxy door cannot reach into a VM: it always has a network link")
	}
	return in, nil
}

// Exec starts req in the VM; a TTY and fd stdio are relayed as messages
// (guestclient does it over a connection that passes no descriptors).
func (s *Sandbox) Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*guestclient.Process, error) {
	return s.client.Exec(req, output, files...)
}

// Call sends one file request and waits for its result.
func (s *Sandbox) Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error) {
	return s.client.Call(ctx, m)
}

// Link is the host's end of the VM's network socketpair.
func (s *Sandbox) Link() *link.Link {
	if s.net == nil {
		return nil
	}
	f := s.net
	s.net = nil // the caller serves and closes it
	return &link.Link{Kind: link.Datagram, File: f}
}

// Done is closed when QEMU has exited.
func (s *Sandbox) Done() <-chan struct{} { return s.exited }

// OOMKilled reports whether QEMU's memory limit killed it (the guest's own
// kernel handles memory pressure inside the VM).
func (s *Sandbox) OOMKilled() bool { return s.cg != nil && s.cg.OOMKilled() }

// GuestPID is QEMU's pid.
func (s *Sandbox) GuestPID() int {
	if s.qemu == nil {
		return 0
	}
	return s.qemu.Pid
}

// Warnings are what is not enforced here, for the user.
func (s *Sandbox) Warnings() []string { return s.warnings }

func (s *Sandbox) kill() {
	if s.qemu != nil {
		s.qemu.Signal(syscall.SIGKILL)
		<-s.exited
	}
}

// endQEMU kills QEMU and closes what launch made for it: its sockets, the
// VFS server on its port, the console's log.
func (s *Sandbox) endQEMU() {
	s.kill()
	if s.conn != nil {
		s.conn.Close()
	}
	if s.net != nil {
		s.net.Close()
	}
	if s.stopVFS != nil {
		s.stopVFS()
		// The shares' providers close after this (Close's closers): no
		// request may still be running on their descriptors by then, or
		// it could resolve a path against a number reused since.
		select {
		case <-s.vfsDone:
		case <-time.After(10 * time.Second):
			fmt.Fprintf(s.opts.Stderr, "airlock: the VM's file service did not end in 10s\n")
		}
	}
	if s.vfsPort != nil {
		s.vfsPort.Close()
	}
	if s.console != nil {
		s.console.close()
	}
}

// Close kills QEMU (the guest has nothing to save) and removes its pid file.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.endQEMU()
		for _, c := range s.closers {
			c()
		}
		if s.pidFile != "" {
			os.Remove(s.pidFile)
		}
		if s.cg != nil {
			s.cg.Destroy()
		}
	})
	return nil
}

// console keeps the guest console's output: up to maxConsoleFile bytes in
// the log file once there is one, and the last lines in memory for errors.
type console struct {
	mu    sync.Mutex
	buf   []byte // everything until the file exists, then the recent tail
	file  *os.File
	wrote int64
	done  chan struct{}
	// initStarted is closed once the guest's /init has said so.
	initStarted chan struct{}
	sawInit     bool
}

const (
	maxConsoleFile = 1 << 20
	maxConsoleTail = 8 << 10
)

func newConsole(r *os.File) *console {
	c := &console{done: make(chan struct{}), initStarted: make(chan struct{})}
	go c.read(r)
	return c
}

func (c *console) read(r *os.File) {
	defer close(c.done)
	defer r.Close()
	b := make([]byte, 4096)
	for {
		n, err := r.Read(b)
		if n > 0 {
			c.mu.Lock()
			if c.file != nil && c.wrote < maxConsoleFile {
				w, _ := c.file.Write(b[:min(n, int(maxConsoleFile-c.wrote))])
				c.wrote += int64(w)
			}
			c.buf = append(c.buf, b[:n]...)
			if !c.sawInit && bytes.Contains(c.buf, []byte(guest.InitStarted)) {
				c.sawInit = true
				close(c.initStarted)
			}
			if len(c.buf) > 2*maxConsoleTail {
				c.buf = append(c.buf[:0], c.buf[len(c.buf)-maxConsoleTail:]...)
			}
			c.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (c *console) saveTo(path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n, _ := f.Write(c.buf)
	c.file, c.wrote = f, int64(n)
}

// tail is the console's last lines, once QEMU's output has been read.
func (c *console) tail() string {
	select {
	case <-c.done:
	case <-time.After(time.Second):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := bytes.TrimSpace(c.buf)
	lines := bytes.Split(b, []byte("\n"))
	lines = lines[max(0, len(lines)-15):]
	return string(bytes.Join(lines, []byte("\n")))
}

func (c *console) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file != nil {
		c.file.Close()
		c.file = nil
	}
}

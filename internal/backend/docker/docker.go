// Package docker runs a sandbox as a hardened Docker container made through
// the Engine API, with airlock's static binary mounted read-only as its
// entrypoint: the guest agent, which speaks the same control protocol as in
// the native backend over a Unix socket the host mounts in.
package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/proto"
)

// ErrClosed is returned for requests to a sandbox that has ended.
var ErrClosed = guestclient.ErrClosed

// Where airlock's own files appear inside the container.
const (
	guestInside = "/run/airlock/airlock" // the static binary, the entrypoint
	ctlInside   = "/run/airlock/ctl"     // Config.RunDir, holding the control socket
	ctlSocket   = "s"
)

// setupTimeout bounds the container's start and the guest's setup.
const setupTimeout = 60 * time.Second

// Config is one container sandbox's shape, as the supervisor decided it.
type Config struct {
	ID        string
	Image     string
	StateRoot string // labelled on the container: whose `airlock prune` may remove it
	// RunDir is a host directory, created here and removed by Close, for the
	// control socket; its path must fit a socket's (about 100 bytes).
	RunDir string
	Exe    string // the static airlock binary; default this executable
	// User is "UID:GID" inside; "" picks the workspace's owner (see User).
	User      string
	Hostname  string
	Workspace string // bound read-write at the same absolute path
	// WorkspaceSource, if set, is the host directory bound at Workspace in
	// its place: a staged copy that the host only sees once applied.
	WorkspaceSource string
	Home            string // the home's path inside: a private tmpfs, or HomeDir
	HomeDir         string // host directory bound at Home; "" for a tmpfs
	RO, RW          []string
	Mask            []string // paths masked inside: files read empty, directories empty and read-only
	Files           []File   // host files bound read-only (gateway socket, CA bundle)
	Relay           *proto.Relay
	Landlock        proto.Landlock
	TmpBytes        int64
	Limits          Limits
}

// File is one host file shown read-only inside.
type File struct {
	Source, Target string
}

// Limits bound the container's resources; zero means no limit.
type Limits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
}

// defaultMasked is the engine's own list, which setting MaskedPaths replaces.
var defaultMasked = []string{
	"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
	"/sys/firmware", "/sys/devices/virtual/powercap",
}

// defaultReadonly is the engine's own list of /proc paths made read-only,
// named here so that no engine's default can leave them out: a container
// that runs as uid 0 owns them, and writing /proc/sysrq-trigger takes no
// capability.
var defaultReadonly = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// Sandbox is one running container sandbox.
type Sandbox struct {
	ID       string
	Warnings []string

	cli       *client.Client
	container string // the engine's ID
	runDir    string
	conn      *proto.Conn
	client    *guestclient.Client
	guestPID  int           // the guest's pid on the host, from the socket's peer credentials
	exited    chan struct{} // closed when the container has stopped

	closeOnce sync.Once
}

// Start creates and starts the container and returns once its guest is
// ready. whileStarting, if set, runs while the container starts; its error
// aborts the start. On any error no container is left behind.
func Start(ctx context.Context, c Config, whileStarting func() error) (_ *Sandbox, err error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if c.Exe == "" {
		if c.Exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("docker: find the airlock binary: %w", err)
		}
	}
	if err := backend.CheckStatic("docker", c.Exe); err != nil {
		return nil, err
	}
	s := &Sandbox{ID: c.ID, runDir: c.RunDir, exited: make(chan struct{})}
	if c.User == "" {
		c.User = User(c.Workspace)
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.cli, err = Connect(ctx); err != nil {
		return nil, err
	}
	if w := s.rootWarning(ctx, c.User); w != "" {
		s.Warnings = append(s.Warnings, w)
	}
	ln, err := s.listen(c)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	for _, f := range c.Files {
		// The container's user must be able to connect to the gateway's
		// socket; its directory is private to the host's user.
		if st, err := os.Stat(f.Source); err == nil && st.Mode()&os.ModeSocket != 0 {
			os.Chmod(f.Source, 0o666)
		}
	}
	// Create and start are not abandoned half-way when ctx ends (a signal):
	// the engine would finish them without us knowing the container. They
	// run to completion, then ctx is checked, and Close removes what exists.
	engineCtx, engineCancel := context.WithTimeout(context.Background(), setupTimeout)
	defer engineCancel()
	cfg, hc := containerSpec(c)
	created, err := s.cli.ContainerCreate(engineCtx, cfg, hc, nil, nil, ContainerName(c.ID))
	if err != nil {
		if ierr := imageError(c.Image, err); ierr != nil {
			return nil, ierr
		}
		return nil, fmt.Errorf("docker: create container: %w", EngineError(s.cli.DaemonHost(), err))
	}
	s.container = created.ID
	for _, w := range created.Warnings {
		s.Warnings = append(s.Warnings, "docker: "+w)
	}
	// Wait before start: an exit that comes at once is not missed.
	waited, waitErr := s.cli.ContainerWait(context.Background(), s.container, container.WaitConditionNextExit)
	go func() {
		select {
		case <-waited:
		case <-waitErr:
		}
		close(s.exited)
	}()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if err := s.cli.ContainerStart(engineCtx, s.container, container.StartOptions{}); err != nil {
		return nil, fmt.Errorf("docker: start container: %w", EngineError(s.cli.DaemonHost(), err))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if whileStarting != nil {
		if err := whileStarting(); err != nil {
			return nil, err
		}
	}
	if err := s.accept(ctx, ln); err != nil {
		return nil, err
	}
	if err := s.init(ctx, c); err != nil {
		return nil, err
	}
	s.client = guestclient.New(s.conn)
	return s, nil
}

// listen makes RunDir and listens on the control socket in it. The
// directory's parent is private to the host's user; the guest is the
// container's first process, so it is the first to connect, and the socket
// is gone once it has.
func (s *Sandbox) listen(c Config) (*net.UnixListener, error) {
	if c.RunDir == "" {
		return nil, errors.New("docker: no run directory for the control socket")
	}
	if err := os.MkdirAll(c.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("docker: control socket dir: %w", err)
	}
	os.Chmod(c.RunDir, 0o711)
	sock := filepath.Join(c.RunDir, ctlSocket)
	os.Remove(sock)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("docker: control socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(sock, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("docker: control socket: %w", err)
	}
	return ln, nil
}

// accept waits for the guest to connect, or for the container to stop.
func (s *Sandbox) accept(ctx context.Context, ln *net.UnixListener) error {
	type result struct {
		c   *net.UnixConn
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.AcceptUnix()
		got <- result{c, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			return fmt.Errorf("docker: accept the guest: %w", r.err)
		}
		ln.Close() // nobody else connects
		if cred, err := peerCred(r.c); err == nil {
			s.guestPID = int(cred.Pid)
		}
		s.conn = proto.NewConn(r.c)
		return nil
	case <-s.exited:
		ln.Close()
		if r := <-got; r.c != nil {
			r.c.Close()
		}
		return fmt.Errorf("docker: the container stopped before its guest started%s", s.logTail())
	case <-ctx.Done():
		ln.Close()
		if r := <-got; r.c != nil {
			r.c.Close()
		}
		return fmt.Errorf("docker: the container's guest did not connect within %s%s", setupTimeout, s.logTail())
	}
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// init sends the guest its lockdown and waits for Ready.
func (s *Sandbox) init(ctx context.Context, c Config) error {
	in := &proto.Init{
		Contained: true,
		Workdir:   c.Workspace,
		Seccomp:   true,
		Relay:     c.Relay,
		Landlock:  c.Landlock,
		Rlimits:   []proto.Rlimit{{Resource: unix.RLIMIT_CORE}},
	}
	if err := s.conn.Send(&proto.Msg{Op: proto.OpInit, Init: in}); err != nil {
		return fmt.Errorf("docker: send the guest its plan: %w", err)
	}
	ready := make(chan *proto.Msg, 1)
	go func() {
		m, files, err := s.conn.Recv()
		proto.CloseFiles(files)
		if err != nil {
			m = &proto.Msg{Op: proto.OpError, Err: &proto.Error{Step: "start", Message: "the guest exited during setup" + s.logTail()}}
		}
		ready <- m
	}()
	select {
	case m := <-ready:
		if m.Op != proto.OpReady {
			if m.Err == nil {
				m.Err = &proto.Error{Message: "unexpected " + m.Op.String()}
			}
			return fmt.Errorf("docker: sandbox setup: %w", m.Err)
		}
		s.Warnings = append(s.Warnings, m.Warnings...)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("docker: sandbox setup took longer than %s", setupTimeout)
	}
}

// logTail is the end of the container's own output (the guest's
// diagnostics), to explain a start that failed.
func (s *Sandbox) logTail() string {
	if s.cli == nil || s.container == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := s.cli.ContainerLogs(ctx, s.container, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 8<<10))
	// The container's output is hostile: no control characters reach the
	// user's terminal.
	clean := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(out.String(), "?"))
	msg := strings.Join(strings.Fields(clean), " ")
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// containerSpec is the container's hardened shape. It does no I/O.
func containerSpec(c Config) (*container.Config, *container.HostConfig) {
	uid, gid, _ := strings.Cut(c.User, ":")
	cfg := &container.Config{
		Image:      c.Image,
		Hostname:   c.Hostname,
		User:       c.User,
		Entrypoint: []string{guestInside, "guest", "--connect", ctlInside + "/" + ctlSocket},
		Cmd:        []string{},
		Env:        []string{},
		WorkingDir: "/",
		Labels:     map[string]string{LabelSandbox: c.ID, LabelState: c.StateRoot},
	}
	tmpOpts := func(mode string, exec bool, owner bool) string {
		o := []string{"rw", "nosuid", "nodev", "mode=" + mode}
		if !exec {
			o = append(o, "noexec")
		}
		if c.TmpBytes > 0 {
			o = append(o, "size="+strconv.FormatInt(c.TmpBytes, 10))
		}
		if owner {
			o = append(o, "uid="+uid, "gid="+gid)
		}
		return strings.Join(o, ",")
	}
	tmpfs := map[string]string{"/tmp": tmpOpts("1777", false, false)}
	bind := func(src, dst string, ro bool) mount.Mount {
		return mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}}
	}
	mounts := []mount.Mount{
		bind(c.Exe, guestInside, true),
		bind(c.RunDir, ctlInside, true),
	}
	if c.HomeDir != "" {
		mounts = append(mounts, bind(c.HomeDir, c.Home, false))
	} else if c.Home != "" && c.Home != "/tmp" && !slices.Contains(c.RO, c.Home) && !slices.Contains(c.RW, c.Home) && c.Home != c.Workspace {
		// (A home that is also the workspace or an --ro/--rw path is that.)
		// Tools install into the home (~/.local/bin): it keeps exec.
		tmpfs[c.Home] = tmpOpts("0700", true, true)
	}
	for _, p := range c.RO {
		mounts = append(mounts, bind(p, p, true))
	}
	for _, p := range c.RW {
		mounts = append(mounts, bind(p, p, false))
	}
	src := c.Workspace
	if c.WorkspaceSource != "" {
		src = c.WorkspaceSource
	}
	mounts = append(mounts, bind(src, c.Workspace, false))
	for _, f := range c.Files {
		mounts = append(mounts, bind(f.Source, f.Target, true))
	}
	pids := c.Limits.Pids
	no := false
	// The same shape serves every user, root included: User picks uid 0 for
	// root's own workspace, as the native backend runs it, and this makes
	// that root without power.
	//
	// Capabilities: cap-drop ALL and no cap-add, so the runtime starts the
	// guest with empty bounding, permitted, effective, inheritable and
	// ambient sets (the guest checks all five before it serves). With the
	// bounding set empty no execve gives any back: not root's, for which the
	// kernel fills the permitted set from the bounding set, and not a file's
	// capabilities, which no-new-privileges ignores along with setuid bits.
	// The native guest also locks the securebits (SECBIT_NOROOT and the
	// rest); that needs CAP_SETPCAP, which the container never holds, and
	// with the bounding set empty those bits would take nothing more away.
	// Seccomp is the engine's default profile (no mount, no new user
	// namespace without CAP_SYS_ADMIN) and airlock's own filter, which the
	// guest installs with Landlock, as natively.
	//
	// What uid 0 keeps is the ownership of root's files, so what a container
	// can see of the host's must not be writable unless it was asked to be:
	//   - the image is the read-only rootfs, and with it read-only the
	//     engine's /etc/hosts, /etc/hostname and /etc/resolv.conf are too;
	//   - airlock's binary, the control socket's directory, Files and --ro
	//     paths are read-only binds, which only CAP_SYS_ADMIN could remount
	//     writable (chmod and chown there fail with EROFS);
	//   - /sys is read-only; /proc keeps the engine's read-only paths
	//     (defaultReadonly: /proc/sysrq-trigger wants no capability, only
	//     ownership) and masked ones, its other knobs mostly want a
	//     capability beyond ownership, and Landlock, where the kernel has
	//     it, refuses every write there; the guest (PID 1) is not dumpable,
	//     so its memory and environment need CAP_SYS_PTRACE;
	//   - /dev, /tmp and the home tmpfs are the container's own, not the
	//     host's (in /dev Landlock leaves writable only /dev/shm, /dev/pts
	//     and the usual device files). Root may chmod the container's own
	//     device nodes, which Landlock does not govern: that spoils only its
	//     own sandbox.
	// The host paths it can write are the workspace, the --rw paths and a
	// bound home: those the user asked the sandbox to write.
	hc := &container.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		IpcMode:        "private",
		Init:           &no, // the guest is PID 1
		Tmpfs:          tmpfs,
		Mounts:         mounts,
		MaskedPaths:    append(append([]string(nil), defaultMasked...), c.Mask...),
		ReadonlyPaths:  append([]string(nil), defaultReadonly...),
		LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
		Resources: container.Resources{
			Memory:     c.Limits.MemoryBytes,
			MemorySwap: c.Limits.MemoryBytes, // no swap beyond the limit
			NanoCPUs:   int64(c.Limits.CPUs * 1e9),
		},
	}
	if pids > 0 {
		hc.Resources.PidsLimit = &pids
	}
	return cfg, hc
}

// User picks the container's user: the workspace's owner, so that what the
// sandbox writes is theirs; else (the workspace is root's, or cannot be
// read) the caller. So root's workspace, run by root, is run as uid 0 — the
// way the native backend runs it — and containerSpec makes that root without
// power.
func User(workspace string) string {
	owner := -1
	var ownerGID uint32
	if st, err := os.Stat(workspace); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			owner, ownerGID = int(sys.Uid), sys.Gid
		}
	}
	return pickUser(owner, ownerGID, os.Getuid(), os.Getgid())
}

// pickUser is User's choice, given the workspace's owner (uid -1: unknown)
// and the caller. Another user's workspace is theirs; a workspace of root's
// is the caller's, which is root only when root runs it.
func pickUser(owner int, ownerGID uint32, uid, gid int) string {
	if owner > 0 {
		return fmt.Sprintf("%d:%d", owner, ownerGID)
	}
	return fmt.Sprintf("%d:%d", uid, gid)
}

// Exec starts req in the container (see guestclient.Client.Exec).
func (s *Sandbox) Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*guestclient.Process, error) {
	return s.client.Exec(req, output, files...)
}

// Dial connects to port on the sandbox's loopback from inside (see
// backend.Dialer).
func (s *Sandbox) Dial(ctx context.Context, port uint16) (net.Conn, error) {
	return s.client.Dial(ctx, port)
}

// Call sends one file request and waits for its result.
func (s *Sandbox) Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error) {
	return s.client.Call(ctx, m)
}

// Done is closed when the container has stopped.
func (s *Sandbox) Done() <-chan struct{} { return s.exited }

// OOMKilled reports, best effort, whether the memory limit killed a
// process: the container's memory cgroup counts OOM kills.
func (s *Sandbox) OOMKilled() bool {
	if s.guestPID == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", s.guestPID))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var files []string
		switch {
		case parts[1] == "memory" || strings.Contains(","+parts[1]+",", ",memory,"):
			files = []string{filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.oom_control")}
		case parts[0] == "0" && parts[1] == "":
			files = []string{filepath.Join("/sys/fs/cgroup", parts[2], "memory.events"), filepath.Join("/sys/fs/cgroup/unified", parts[2], "memory.events")}
		}
		for _, f := range files {
			if oomKills(f) > 0 {
				return true
			}
		}
	}
	return false
}

func oomKills(file string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Close ends the sandbox: the control channel closes (the guest, PID 1,
// exits and the container stops), then the container is removed, killed
// first if it has not stopped. It is safe to call twice.
func (s *Sandbox) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.conn != nil {
			s.conn.Close()
		}
		if s.cli != nil && s.container != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = s.cli.ContainerRemove(ctx, s.container, container.RemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !isGone(err) {
				err = fmt.Errorf("docker: remove container %s: %w (airlock prune retries)", ContainerName(s.ID), err)
			} else {
				err = nil
			}
		}
		if s.runDir != "" {
			os.RemoveAll(s.runDir)
		}
		if s.cli != nil {
			s.cli.Close()
		}
	})
	return err
}

// rootWarning says what a container run as uid 0 by root cannot be given:
// the native backend's own id range with idmapped mounts. The Engine API
// idmaps no bind mount, so unless the daemon remaps user namespaces
// (dockerd --userns-remap), uid 0 inside is host root to the binds — the
// workspace, the home, --rw and --ro paths, though no other host file is
// shown. ("" when that does not apply.)
func (s *Sandbox) rootWarning(ctx context.Context, user string) string {
	if os.Getuid() != 0 || !strings.HasPrefix(user, "0:") {
		return ""
	}
	info, err := s.cli.Info(ctx)
	if err == nil {
		for _, o := range info.SecurityOptions {
			if strings.Contains(o, "name=userns") {
				return ""
			}
		}
	}
	return "docker: the container runs as uid 0, which is host root to its bind mounts (the workspace, the home, --rw and --ro paths): the Docker Engine idmaps no bind mount; start dockerd with --userns-remap to give containers ids of their own, or use the native backend"
}

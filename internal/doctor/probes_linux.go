package doctor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/cgroup"
	"github.com/airlock-dev/airlock/internal/seccomp"
	"github.com/airlock-dev/airlock/internal/subid"
)

// childTimeout bounds one namespace child; /bin/true takes a few milliseconds.
const childTimeout = 300 * time.Millisecond

// namespaces are the ones the native backend creates for every sandbox, in clone(2) order.
var namespaces = []struct {
	flag uintptr
	name string
}{
	{unix.CLONE_NEWUSER, "user"},
	{unix.CLONE_NEWNS, "mount"},
	{unix.CLONE_NEWPID, "pid"},
	{unix.CLONE_NEWIPC, "ipc"},
	{unix.CLONE_NEWUTS, "uts"},
	{unix.CLONE_NEWNET, "net"},
	{unix.CLONE_NEWCGROUP, "cgroup"},
}

func allNamespaces() uintptr {
	var f uintptr
	for _, n := range namespaces {
		f |= n.flag
	}
	return f
}

// spawn runs /bin/true in new namespaces as the calling user mapped to root inside.
// Flags in unshare are unshared by the child after its uid map is written; for
// CLONE_NEWNS Go then remounts / private, so success also proves the child holds
// CAP_SYS_ADMIN in its namespace (an AppArmor userns restriction would strip it).
func spawn(clone, unshare uintptr) error {
	path := ""
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if _, err := os.Stat(p); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		// Nothing to run: the child dies at execve with ENOENT, which it only reaches
		// after every namespace step succeeded.
		path = "/nonexistent/airlock-doctor-true"
	}
	sys := &syscall.SysProcAttr{
		Cloneflags:                 clone,
		Unshareflags:               unshare,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL, // never outlive a killed doctor
	}
	p, err := os.StartProcess(path, []string{"true"}, &os.ProcAttr{Dir: "/", Env: []string{}, Sys: sys})
	if err != nil {
		if strings.HasPrefix(path, "/nonexistent/") && errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return err
	}
	t := time.AfterFunc(childTimeout, func() { _ = p.Kill() })
	st, err := p.Wait()
	t.Stop()
	if err != nil {
		return err
	}
	if !st.Success() {
		return fmt.Errorf("/bin/true in the namespaces: %s", st)
	}
	return nil
}

func probeUserNS() Check {
	c := Check{Name: NameUserNS}
	all := allNamespaces()
	maxNS := readSysctl("/proc/sys/user/max_user_namespaces")
	err := spawn(all&^unix.CLONE_NEWNS, unix.CLONE_NEWNS)
	if err == nil {
		c.Status = StatusOK
		c.Detail = "user, mount, pid, ipc, uts, net and cgroup namespaces; mounts work inside"
		if maxNS != "" {
			c.Detail += " (user.max_user_namespaces=" + maxNS + ")"
		}
		return c
	}
	c.Status = StatusMissing
	if spawn(all, 0) == nil {
		c.Detail = "namespaces are created, but mounting inside them fails: " + errText(err)
		c.Impact = "the native backend cannot build the sandbox's filesystem; " + usernsFix(err)
		return c
	}
	var failed []string
	if uerr := spawn(unix.CLONE_NEWUSER, 0); uerr != nil {
		failed, err = []string{"user"}, uerr
	} else {
		for _, n := range namespaces[1:] {
			if nerr := spawn(unix.CLONE_NEWUSER|n.flag, 0); nerr != nil {
				failed, err = append(failed, n.name), nerr
			}
		}
	}
	if len(failed) == 0 {
		// Each works alone but not together, e.g. a namespace limit reached midway.
		c.Detail = "creating all namespaces at once fails: " + errText(err)
	} else {
		c.Detail = "cannot create " + strings.Join(failed, ", ") + " namespace: " + errText(err)
	}
	c.Impact = "the native backend cannot start sandboxes; " + usernsFix(err)
	return c
}

// usernsFix turns a namespace error and the sysctls that gate user namespaces into advice.
func usernsFix(err error) string {
	if v := readSysctl("/proc/sys/user/max_user_namespaces"); v == "0" || errors.Is(err, syscall.ENOSPC) {
		return "raise the limit (now " + v + "): sysctl -w user.max_user_namespaces=15000"
	}
	if readSysctl("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
		return "allow unprivileged user namespaces: sysctl -w kernel.unprivileged_userns_clone=1"
	}
	if readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
		return "AppArmor restricts unprivileged user namespaces: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or give airlock an AppArmor profile with the userns rule"
	}
	if errors.Is(err, syscall.EUSERS) {
		return "user namespaces are nested 32 deep already: run airlock from an outer namespace"
	}
	if errors.Is(err, syscall.EINVAL) {
		return "the kernel lacks CONFIG_USER_NS (or this process is chrooted): use a kernel with user namespaces, or run outside the chroot"
	}
	if mode, _ := seccompMode(); mode == 2 {
		return "this process runs under a seccomp filter (a container?) that may refuse clone: run the container with --security-opt seccomp=unconfined, or run airlock on the host"
	}
	return "run as root, or check the LSM policy (SELinux, AppArmor) that refuses them"
}

// mountSyscalls are the new mount API calls the sandbox's filesystem view is built with.
// Each is called with flags that are all ones, which the kernel refuses with EINVAL before
// doing anything, so the only possible side effect, a returned fd, never happens.
// move_mount and fsopen check privilege first, so unprivileged they answer EPERM, which
// proves them present just as well; for the others EPERM can only come from a filter.
var mountSyscalls = []struct {
	name      string
	nr        uintptr
	permFirst bool
	call      func(nr uintptr, empty *byte) (uintptr, syscall.Errno)
}{
	{"open_tree", unix.SYS_OPEN_TREE, false, func(nr uintptr, e *byte) (uintptr, syscall.Errno) {
		r, _, errno := unix.Syscall(nr, ^uintptr(0), uintptr(unsafe.Pointer(e)), 0xffffffff)
		return r, errno
	}},
	{"move_mount", unix.SYS_MOVE_MOUNT, true, func(nr uintptr, e *byte) (uintptr, syscall.Errno) {
		r, _, errno := unix.Syscall6(nr, ^uintptr(0), uintptr(unsafe.Pointer(e)), ^uintptr(0), uintptr(unsafe.Pointer(e)), 0xffffffff, 0)
		return r, errno
	}},
	{"mount_setattr", unix.SYS_MOUNT_SETATTR, false, func(nr uintptr, e *byte) (uintptr, syscall.Errno) {
		r, _, errno := unix.Syscall6(nr, ^uintptr(0), uintptr(unsafe.Pointer(e)), 0xffffffff, 0, 0, 0)
		return r, errno
	}},
	{"fsopen", unix.SYS_FSOPEN, true, func(nr uintptr, e *byte) (uintptr, syscall.Errno) {
		r, _, errno := unix.Syscall(nr, uintptr(unsafe.Pointer(e)), 0xffffffff, 0)
		return r, errno
	}},
}

func probeMountAPI() Check {
	c := Check{Name: NameMountAPI}
	empty := new(byte)
	var absent, blocked []string
	for _, s := range mountSyscalls {
		r, errno := s.call(s.nr, empty)
		switch {
		case errno == 0:
			_ = unix.Close(int(r)) // not expected; still, leave no fd behind
		case errno == syscall.ENOSYS:
			absent = append(absent, s.name)
		case errno == syscall.EPERM && !s.permFirst:
			blocked = append(blocked, s.name)
		}
	}
	switch {
	case len(absent) > 0:
		c.Status = StatusMissing
		c.Detail = "no " + strings.Join(absent, ", ") + " (ENOSYS)"
		c.Impact = "the native backend cannot build the sandbox's filesystem: it needs Linux 5.12+ (mount_setattr); upgrade the kernel, or lift the seccomp filter that answers ENOSYS"
	case len(blocked) > 0:
		c.Status = StatusMissing
		c.Detail = strings.Join(blocked, ", ") + " refused with EPERM, likely by a seccomp filter"
		c.Impact = "the native backend cannot build the sandbox's filesystem: run the container with --security-opt seccomp=unconfined, or run airlock on the host"
	default:
		c.Status = StatusOK
		c.Detail = "open_tree, move_mount, mount_setattr, fsopen"
	}
	return c
}

func probeLandlock() Check {
	c := Check{Name: NameLandlock}
	abi, err := llsys.LandlockGetABIVersion()
	const lost = "writes are confined by read-only mounts only, and --no-delete is refused"
	switch {
	case errors.Is(err, syscall.EOPNOTSUPP):
		c.Status = StatusMissing
		c.Detail = "built in but disabled at boot"
		c.Impact = lost + "; add landlock to the lsm= kernel parameter (see /sys/kernel/security/lsm), e.g. lsm=landlock,lockdown,yama,apparmor,bpf"
		return c
	case err != nil || abi < 1:
		c.Status = StatusMissing
		c.Detail = "not in this kernel (" + errText(err) + ")"
		c.Impact = lost + "; needs Linux 5.13+ with CONFIG_SECURITY_LANDLOCK=y and landlock in lsm="
		return c
	}
	c.Detail = fmt.Sprintf("Landlock ABI %d", abi)
	// What each older ABI leaves unconfined, newest first, with the kernel that fixes it.
	var gaps []string
	if abi < 6 {
		gaps = append(gaps, "abstract UNIX sockets and signals to outside processes (ABI 6, Linux 6.12)")
	}
	if abi < 5 {
		gaps = append(gaps, "ioctl on devices (ABI 5, Linux 6.10)")
	}
	if abi < 3 {
		gaps = append(gaps, "truncate (ABI 3, Linux 6.2)")
	}
	if abi < 2 {
		gaps = append(gaps, "renames and links across directories are refused entirely (ABI 2, Linux 5.19)")
	}
	if len(gaps) == 0 {
		c.Status = StatusOK
		return c
	}
	c.Status = StatusDegraded
	c.Impact = "not confined: " + strings.Join(gaps, "; ") + "; upgrade the kernel"
	return c
}

func probeSeccomp() Check {
	c := Check{Name: NameSeccomp, Status: StatusMissing}
	mode, err := seccompMode()
	if err != nil {
		c.Detail = "prctl(PR_GET_SECCOMP): " + errText(err)
		c.Impact = "the sandbox's syscall filter cannot be installed: the kernel needs CONFIG_SECCOMP_FILTER=y"
		return c
	}
	action := uint32(unix.SECCOMP_RET_ERRNO)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
		c.Detail = "seccomp(SECCOMP_GET_ACTION_AVAIL, RET_ERRNO): " + errText(e)
		c.Impact = "the sandbox's syscall filter cannot be installed: needs Linux 4.14+ with CONFIG_SECCOMP_FILTER=y, and no outer filter refusing seccomp(2)"
		return c
	}
	// A NULL program with TSYNC: the kernel validates the flags, then fails copying the
	// program (EFAULT) before anything is installed. EINVAL would mean TSYNC is unknown.
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, 0); e != syscall.EFAULT {
		c.Detail = "seccomp(SECCOMP_SET_MODE_FILTER, TSYNC) probe: " + errText(e)
		c.Impact = "the filter cannot be applied to every thread of the guest: needs Linux 3.17+ and no outer filter refusing seccomp(2)"
		return c
	}
	prog, err := seccomp.Program()
	if err != nil {
		c.Detail = "airlock's filter does not build: " + err.Error()
		c.Impact = "a bug in airlock for this architecture: please report it"
		return c
	}
	c.Status = StatusOK
	c.Detail = fmt.Sprintf("filter mode with TSYNC; airlock's filter: %d instructions, %d syscalls denied", len(prog), len(seccomp.Denied()))
	if mode == 2 {
		c.Detail += "; this process is already filtered (filters stack)"
	}
	return c
}

// seccompMode is this process's seccomp mode: 0 none, 1 strict, 2 filter.
func seccompMode() (int, error) {
	return unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
}

func probeCgroups() Check {
	c := Check{Name: NameCgroups}
	s := cgroup.Probe()
	var have []string
	var lost []string
	if s.Memory {
		have = append(have, "memory")
	} else {
		lost = append(lost, "--memory falls back to RLIMIT_DATA per process (private writable memory only, not page cache or the whole sandbox)")
	}
	if s.CPU {
		have = append(have, "cpu")
	} else {
		lost = append(lost, "--cpus is not enforced")
	}
	if s.Pids {
		have = append(have, "pids")
	} else {
		lost = append(lost, "--pids falls back to RLIMIT_NPROC, counted per user rather than per sandbox")
	}
	switch {
	case s.Version == 0:
		c.Detail = "no usable cgroup"
	case len(have) == 0:
		c.Detail = fmt.Sprintf("cgroup v%d, no controller writable", s.Version)
	default:
		c.Detail = fmt.Sprintf("cgroup v%d: %s", s.Version, strings.Join(have, ", "))
	}
	if s.Reason != "" {
		c.Detail += " (" + strings.TrimPrefix(s.Reason, cgroup.ErrUnavailable.Error()+": ") + ")"
	}
	if len(lost) == 0 {
		c.Status = StatusOK
		return c
	}
	// Limits still hold in part through rlimits, so this never stops a sandbox.
	c.Status = StatusDegraded
	fix := "run as root, or delegate a cgroup v2 subtree to this user: systemd-run --user --scope -p Delegate=yes airlock run ..."
	if s.Version == 1 {
		fix = "run as root, or start airlock inside cgroups this user owns (as root: mkdir and chown one under memory, cpu and pids, then write the shell's pid to each cgroup.procs), or boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) and use systemd-run --user --scope -p Delegate=yes airlock run ..."
	}
	if os.Geteuid() == 0 {
		fix = "enable the controllers in the parent cgroup (echo '+memory +cpu +pids' > <parent>/cgroup.subtree_control), or in a container give it a writable cgroup (docker run --cgroupns=private)"
	}
	c.Impact = strings.Join(lost, "; ") + "\n" + fix
	return c
}

func probeTun() Check {
	const dev = "/dev/net/tun"
	c := Check{Name: NameTun}
	// Opening alone creates no interface; that takes TUNSETIFF, which is never called here.
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == nil {
		_ = unix.Close(fd)
		c.Status = StatusOK
		c.Detail = "opens read-write: sandboxes get the transparent network (a TAP device into the gateway)"
		return c
	}
	c.Status = StatusDegraded
	const lost = "the sandbox's network goes through the gateway's explicit HTTP(S) proxy; tools that ignore HTTP_PROXY/HTTPS_PROXY get no network"
	var st unix.Stat_t
	switch {
	case errors.Is(err, syscall.ENOENT):
		c.Detail = "does not exist"
		c.Impact = lost + "\nload the module and create the node: modprobe tun (the kernel needs CONFIG_TUN)"
	case unix.Stat(dev, &st) == nil:
		c.Detail = fmt.Sprintf("cannot open: %s (mode %04o, owner uid %d)", errText(err), st.Mode&0o7777, st.Uid)
		c.Impact = lost + "\nrun as root, or let users open it (it is safe: creating a device still needs CAP_NET_ADMIN): chmod 0666 /dev/net/tun, kept with a udev rule KERNEL==\"tun\", MODE=\"0666\""
	default:
		c.Detail = "cannot open: " + errText(err)
		c.Impact = lost + "\nrun as root, or make /dev/net/tun readable and writable for this user"
	}
	return c
}

// probeOverlay infers rather than mounts: trying it needs code running inside a user
// namespace, which a fork without cgo cannot run before execve.
func probeOverlay(ver [2]int, userns bool) Check {
	c := Check{Name: NameOverlay}
	const lost = "the workspace overlay mode is unavailable; the default bind-mounted workspace is unaffected"
	if !userns {
		c.Status = StatusMissing
		c.Detail = "needs user namespaces"
		c.Impact = lost
		return c
	}
	loaded := hasFilesystem("overlay")
	newEnough := atLeast(ver, 5, 11)
	switch {
	case loaded && newEnough:
		c.Status = StatusOK
		c.Detail = fmt.Sprintf("overlay registered and Linux %d.%d ≥ 5.11 allows it in a user namespace (inferred, not mounted)", ver[0], ver[1])
	case !loaded:
		c.Status = StatusDegraded
		c.Detail = "not verified: overlay is not in /proc/filesystems (module not loaded?)"
		c.Impact = lost + "\nload it now and at boot: modprobe overlay; echo overlay > /etc/modules-load.d/overlay.conf"
	default:
		c.Status = StatusDegraded
		c.Detail = fmt.Sprintf("not verified: Linux %d.%d predates 5.11, where only some distribution kernels allow overlay in a user namespace", ver[0], ver[1])
		c.Impact = lost + " if the kernel refuses it\nupgrade to Linux 5.11+"
	}
	return c
}

func hasFilesystem(name string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == name {
			return true
		}
	}
	return false
}

// readSysctl returns a /proc/sys value trimmed, or "" when absent.
func readSysctl(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// errText names an error by its errno constant when it has one, which is what users search for.
func errText(err error) string {
	if err == nil {
		return "no error"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if name := unix.ErrnoName(e); name != "" {
			return name + " (" + e.Error() + ")"
		}
		return "errno " + strconv.Itoa(int(e))
	}
	return err.Error()
}

// probeIDs says which identity root's sandboxes get: a slot of airlock's id
// range with idmapped mounts (the workspace's filesystem must take them:
// the current directory's is tried), or nothing but --no-idmap. With fix it
// reserves the range first.
func probeIDs(fix bool) (Check, []string) {
	c := Check{Name: NameIDs}
	if os.Geteuid() != 0 {
		c.Status = StatusOK
		c.Detail = fmt.Sprintf("not root: a sandbox maps only uid %d, yours", os.Geteuid())
		return c, nil
	}
	p := subid.DefaultPaths
	var fixed []string
	r, err := p.Read()
	if fix && errors.Is(err, subid.ErrNoRange) {
		var created bool
		if r, created, err = p.Ensure(); created {
			fixed = append(fixed, fmt.Sprintf("reserved uids %d-%d in %s and gids %d-%d in %s for airlock's sandboxes", r.UID, r.UID+uint32(r.Slots*subid.SlotSize)-1, p.SubUID, r.GID, r.GID+uint32(r.Slots*subid.SlotSize)-1, p.SubGID))
		}
	}
	if err != nil {
		c.Status = StatusMissing
		c.Detail = "as root: " + err.Error()
		c.Impact = "airlock run reserves one on first use where /etc is writable; run `airlock doctor --fix` to do it now.\nWithout it a sandbox run as root must pass --no-idmap and runs as host root: root-owned files that are not hidden become readable inside."
		return c, fixed
	}
	rng := fmt.Sprintf("uids %d-%d (%d sandboxes at once, %d running)", r.UID, r.UID+uint32(r.Slots*subid.SlotSize)-1, r.Slots, p.InUse(r))
	wd, _ := os.Getwd()
	if wd == "" {
		wd = "/"
	}
	if err := subid.CanIDMap("/proc/self/exe", wd, r.UID); err != nil {
		c.Status = StatusDegraded
		c.Detail = fmt.Sprintf("as root: %s; but %s (%s) refuses idmapped mounts (%s)", rng, wd, subid.FSType(wd), errText(err))
		c.Impact = "a workspace, --home or --rw there cannot be given to a sandbox run as root: use a directory on another filesystem (ext4, xfs, btrfs, tmpfs 6.3+), or pass --no-idmap to run as host root (unsafe)"
		return c, fixed
	}
	c.Status = StatusOK
	c.Detail = fmt.Sprintf("as root: %s from %s; idmapped mounts work on %s (%s)", rng, p.SubUID, subid.FSType(wd), wd)
	return c, fixed
}

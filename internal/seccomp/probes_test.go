package seccomp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A probe makes one syscall and reports its errno (0 on success). Arguments
// are chosen so that, without the filter, the kernel fails with a different
// errno (EFAULT, EINVAL, EBADF, ...) or succeeds harmlessly, at least as root;
// an EPERM from the filtered run is therefore the filter's doing.
type probe struct {
	name string
	want unix.Errno // errno expected under the filter
	fn   func() unix.Errno
}

func sys(nr uintptr, args ...uintptr) func() unix.Errno {
	return func() unix.Errno {
		var a [6]uintptr
		copy(a[:], args)
		_, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		return e
	}
}

const (
	bad     = ^uintptr(0) // an invalid fd (-1) or an "all bits" flag word
	badAddr = uintptr(1)  // an unmapped user address
)

var probes = []probe{
	{"ptrace", unix.EPERM, func() unix.Errno {
		// PEEKDATA on ourselves: ESRCH without the filter, never stops anything.
		return sys(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getpid()))()
	}},
	{"process_vm_readv", unix.EPERM, func() unix.Errno {
		return sys(unix.SYS_PROCESS_VM_READV, uintptr(os.Getpid()), 0, 0, 0, 0, 1)()
	}},
	{"process_vm_writev", unix.EPERM, func() unix.Errno {
		return sys(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getpid()), 0, 0, 0, 0, 1)()
	}},
	{"mount", unix.EPERM, sys(unix.SYS_MOUNT, 0, 0, 0, 0, 0)},
	{"umount2", unix.EPERM, sys(unix.SYS_UMOUNT2, 0, bad)},
	{"pivot_root", unix.EPERM, sys(unix.SYS_PIVOT_ROOT, badAddr, badAddr)},
	{"setns", unix.EPERM, sys(unix.SYS_SETNS, bad, 0)},
	{"keyctl", unix.EPERM, sys(unix.SYS_KEYCTL, 9999)},
	{"bpf", unix.EPERM, sys(unix.SYS_BPF, 9999, 0, 0)},
	{"perf_event_open", unix.EPERM, sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, bad, bad, bad)},
	{"userfaultfd", unix.EPERM, sys(unix.SYS_USERFAULTFD, 1|0x8000)}, // UFFD_USER_MODE_ONLY | junk
	{"io_uring_setup", unix.EPERM, sys(unix.SYS_IO_URING_SETUP, 1, badAddr)},
	{"io_uring_enter", unix.EPERM, sys(unix.SYS_IO_URING_ENTER, bad)},
	{"open_by_handle_at", unix.EPERM, sys(unix.SYS_OPEN_BY_HANDLE_AT, bad, badAddr, 0)},
	{"name_to_handle_at", unix.EPERM, sys(unix.SYS_NAME_TO_HANDLE_AT, bad, badAddr, badAddr, badAddr, 0)},
	{"reboot", unix.EPERM, sys(unix.SYS_REBOOT, 0, 0, 0, 0)}, // bad magic: EINVAL as root
	{"swapon", unix.EPERM, sys(unix.SYS_SWAPON, 0, bad)},
	{"acct", unix.EPERM, sys(unix.SYS_ACCT, badAddr)},
	{"settimeofday", unix.EPERM, sys(unix.SYS_SETTIMEOFDAY, badAddr, 0)},
	{"kcmp", unix.EPERM, sys(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(os.Getpid()), 9999)},
	{"syslog", unix.EPERM, sys(unix.SYS_SYSLOG, 9999)},

	{"unshare(CLONE_NEWUSER)", unix.EPERM, sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)},
	{"unshare(CLONE_NEWNS)", unix.EPERM, sys(unix.SYS_UNSHARE, unix.CLONE_NEWNS)},
	{"unshare(CLONE_NEWNET)", unix.EPERM, sys(unix.SYS_UNSHARE, unix.CLONE_NEWNET)},
	{"unshare(0)", 0, sys(unix.SYS_UNSHARE, 0)},
	{"clone3", unix.ENOSYS, sys(unix.SYS_CLONE3, 0, 0)},

	{"ioctl(-1, TIOCSTI)", unix.EPERM, sys(unix.SYS_IOCTL, bad, unix.TIOCSTI, badAddr)},
	{"ioctl(-1, 1<<32|TIOCSTI)", unix.EPERM, sys(unix.SYS_IOCTL, bad, 1<<32|unix.TIOCSTI, badAddr)},
	{"ioctl(-1, TIOCLINUX)", unix.EPERM, sys(unix.SYS_IOCTL, bad, unix.TIOCLINUX, badAddr)},
	{"ioctl(-1, TIOCGWINSZ)", unix.EBADF, sys(unix.SYS_IOCTL, bad, unix.TIOCGWINSZ, badAddr)},
	{"ioctl(pty, TIOCSTI)", unix.EPERM, func() unix.Errno {
		return onPty(func(fd int) unix.Errno {
			c := byte('x')
			return sys(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))()
		})
	}},
	{"ioctl(pty, TIOCGWINSZ)", 0, func() unix.Errno {
		return onPty(func(fd int) unix.Errno {
			_, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
			return errno(err)
		})
	}},

	{"personality(0)", 0, sys(unix.SYS_PERSONALITY, 0)},
	{"personality(query)", 0, sys(unix.SYS_PERSONALITY, 0xffffffff)},
	{"personality(ADDR_NO_RANDOMIZE)", unix.EPERM, sys(unix.SYS_PERSONALITY, 0x40000)},

	// How Go's os/exec fares with namespace requests under the filter.
	{"exec Cloneflags=CLONE_NEWUSER", unix.EPERM, execWith(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER})},
	{"exec Unshareflags=CLONE_NEWNS", unix.EPERM, execWith(&syscall.SysProcAttr{Unshareflags: unix.CLONE_NEWNS})},
	// Go uses clone3 only for CLONE_NEWTIME and CgroupFD, with no fallback to clone.
	{"exec Cloneflags=CLONE_NEWTIME (clone3)", unix.ENOSYS, execWith(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWTIME})},
	{"exec UseCgroupFD (clone3)", unix.ENOSYS, func() unix.Errno {
		fd, err := unix.Open("/sys/fs/cgroup", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return errno(err)
		}
		defer unix.Close(fd)
		return execWith(&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd})()
	}},
}

func allProbes() []probe { return slices.Concat(probes, archProbes) }

func init() {
	for _, p := range allProbes() {
		scenarios["probe:"+p.name] = func() error {
			_, err := fmt.Printf("errno=%d\n", p.fn())
			return err
		}
	}
}

// errno extracts the unix.Errno from err (0 for nil, -1 if there is none).
func errno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return ^unix.Errno(0)
}

func execWith(attr *syscall.SysProcAttr) func() unix.Errno {
	return func() unix.Errno {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = attr
		return errno(cmd.Run())
	}
}

// onPty opens a pty pair the creack/pty way and runs fn on the replica.
func onPty(fn func(fd int) unix.Errno) unix.Errno {
	ptmx, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errno(err)
	}
	defer unix.Close(ptmx)
	if err := unix.IoctlSetPointerInt(ptmx, unix.TIOCSPTLCK, 0); err != nil {
		return errno(err)
	}
	n, err := unix.IoctlGetInt(ptmx, unix.TIOCGPTN)
	if err != nil {
		return errno(err)
	}
	pts, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errno(err)
	}
	defer unix.Close(pts)
	return fn(pts)
}

func runProbe(t *testing.T, name string, install bool) unix.Errno {
	t.Helper()
	out, err := runChild(t, "probe:"+name, install)
	var ee *exec.ExitError
	if !install && errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		t.Skipf("probe crashes even without the filter (unsupported here?): %v", err)
	}
	if err != nil {
		t.Fatalf("probe child (install=%v): %v", install, err)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(out), "errno="))
	if err != nil {
		t.Fatalf("probe child (install=%v): bad output %q", install, out)
	}
	return unix.Errno(n)
}

func errName(e unix.Errno) string {
	if e == 0 {
		return "success"
	}
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return fmt.Sprintf("errno %d", int(e))
}

func TestEnforcement(t *testing.T) {
	root := os.Geteuid() == 0
	for _, p := range allProbes() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			before := runProbe(t, p.name, false)
			after := runProbe(t, p.name, true)
			if after != p.want {
				t.Errorf("under the filter: %s, want %s (without: %s)", errName(after), errName(p.want), errName(before))
			}
			switch {
			case before != p.want:
				t.Logf("%s without the filter, %s with it", errName(before), errName(after))
			case p.want == 0 || p.want == unix.EBADF:
				// An allowed call: same result either way, as intended.
			case root:
				// As root every denied probe is chosen to behave differently
				// without the filter, so this one proves nothing.
				t.Errorf("without the filter: also %s; probe is inconclusive", errName(before))
			default:
				t.Logf("inconclusive as uid %d: %s even without the filter", os.Geteuid(), errName(before))
			}
		})
	}
}

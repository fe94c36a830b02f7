package vm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// nobody is the host uid and gid root's QEMU runs as: it owns nothing, and
// QEMU reaches its images only through the descriptors it inherits.
const nobody = 65534

// jailed is QEMU's command: in its own user, mount, PID, IPC, UTS and
// network namespaces (no network at all: frames leave only through the
// socketpair it inherits), as the caller's uid (nobody when that is root,
// with no supplementary groups), killed with the thread that started it.
// files become fds 3, 4, …; QEMU's stdout and stderr go to stderr.
func jailed(qemu string, args []string, files []*os.File, stderr *os.File) *exec.Cmd {
	cmd := exec.Command(qemu, args...)
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.ExtraFiles = files
	uid, gid := os.Getuid(), os.Getgid()
	var cred *syscall.Credential
	if uid == 0 {
		uid, gid = nobody, nobody
		cred = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC |
			unix.CLONE_NEWUTS | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: cred != nil,
		Credential:                 cred,
		Pdeathsig:                  syscall.SIGKILL,
		Setsid:                     true,
	}
	return cmd
}

// errNoLandlock says the host kernel cannot confine QEMU's file access.
var errNoLandlock = errors.New("the host kernel has no Landlock")

// landlockThread restricts the calling thread, which must be locked and
// start QEMU next, to what QEMU reads: its libraries and firmware, /etc,
// /proc and /sys, the devices it uses, and the boot files (which it opens
// through /proc/self/fd). It writes nowhere but /proc (Go's fork writes the
// child's uid_map from this thread) and those devices. A child inherits
// the thread's domain; other threads of this process are untouched.
func landlockThread(qemu string, bootFiles []string) error {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return errNoLandlock
	}
	const (
		ro    = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
		v1All = 1<<13 - 1
	)
	handled := uint64(v1All)
	fileRW := uint64(llsys.AccessFSReadFile | llsys.AccessFSWriteFile)
	if abi >= 2 {
		handled |= llsys.AccessFSRefer
	}
	if abi >= 3 {
		handled |= llsys.AccessFSTruncate
	}
	if abi >= 5 {
		handled |= llsys.AccessFSIoctlDev
		fileRW |= llsys.AccessFSIoctlDev
	}
	fd, err := llsys.LandlockCreateRuleset(&llsys.RulesetAttr{HandledAccessFS: handled}, 0)
	if err != nil {
		return fmt.Errorf("landlock ruleset: %w", err)
	}
	defer unix.Close(fd)
	add := func(p string, access uint64) error {
		pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // absent here: nothing to allow
		}
		defer unix.Close(pfd)
		return llsys.LandlockAddPathBeneathRule(fd, &llsys.PathBeneathAttr{AllowedAccess: access, ParentFd: pfd}, 0)
	}
	for _, d := range []string{"/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/sys"} {
		if err := add(d, ro); err != nil {
			return fmt.Errorf("landlock %s: %w", d, err)
		}
	}
	if err := add("/proc", ro|llsys.AccessFSWriteFile); err != nil {
		return fmt.Errorf("landlock /proc: %w", err)
	}
	for _, d := range []string{"/dev/kvm", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"} {
		if err := add(d, fileRW); err != nil {
			return fmt.Errorf("landlock %s: %w", d, err)
		}
	}
	if err := add(qemu, llsys.AccessFSExecute|llsys.AccessFSReadFile); err != nil { // $AIRLOCK_QEMU may live anywhere
		return fmt.Errorf("landlock %s: %w", qemu, err)
	}
	for _, f := range bootFiles {
		if err := add(f, llsys.AccessFSReadFile); err != nil {
			return fmt.Errorf("landlock %s: %w", f, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return llsys.LandlockRestrictSelf(fd, 0)
}

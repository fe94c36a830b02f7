package vm

import (
	"os"
	"os/exec"
	"syscall"

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

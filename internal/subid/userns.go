package subid

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Userns returns a descriptor of a new user namespace with these maps.
// Only a process can make one: a child of exe is cloned into it and stops
// at its exec (PTRACE_TRACEME), before any of its code runs, and is killed
// once the namespace is open. (runc does the same.)
func Userns(exe string, uids, gids []syscall.SysProcIDMap) (int, error) {
	pid, err := syscall.ForkExec(exe, []string{"airlock-userns"}, &syscall.ProcAttr{
		Env: []string{},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: uids, GidMappings: gids,
			Ptrace:    true,
			Pdeathsig: syscall.SIGKILL,
		},
	})
	if err != nil {
		return -1, err
	}
	defer func() {
		unix.Kill(pid, unix.SIGKILL)
		for {
			var ws unix.WaitStatus
			_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
			if err != nil && !errors.Is(err, unix.EINTR) || err == nil && (ws.Exited() || ws.Signaled()) {
				return
			}
		}
	}()
	return unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// CanIDMap reports whether the filesystem holding dir takes an idmapped
// mount (mapping the slot at base), by making one and throwing it away.
func CanIDMap(exe, dir string, base uint32) error {
	ns, err := Userns(exe, []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: 1}}, []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: 1}})
	if err != nil {
		return fmt.Errorf("user namespace: %w", err)
	}
	defer unix.Close(ns)
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns), Propagation: unix.MS_PRIVATE})
}

// FSType names p's filesystem type from /proc/self/mountinfo ("unknown" if
// it cannot tell).
func FSType(p string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	best, name := -1, "unknown"
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(f) < 5 || sep < 0 || sep+1 >= len(f) {
			continue
		}
		mp := unescapeMount(f[4])
		if (p == mp || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= best {
			best, name = len(mp), f[sep+1]
		}
	}
	return name
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return filepath.Clean(s)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return filepath.Clean(b.String())
}

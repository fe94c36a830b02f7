package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// removeAttempts bounds how long Destroy chases processes that are exiting or forking.
	removeAttempts = 50
	maxRetryDelay  = 100 * time.Millisecond
	// maxDepth bounds recursion into sub-cgroups a delegated sandbox may have made.
	maxDepth = 16
)

// writeFile writes val to a cgroup control file. It neither creates nor truncates: cgroupfs
// files exist or the controller is off, and each write is one command.
func writeFile(dir, file, val string) error {
	p := filepath.Join(dir, file)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup: write %s: %w", p, err)
	}
	_, err = f.WriteString(val)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %s: %w", p, err)
	}
	return nil
}

// writeOptional is writeFile for files some kernels lack (swap accounting off, older kernels).
func writeOptional(dir, file, val string) error {
	err := writeFile(dir, file, val)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// readFields returns the words of a file as a set; empty when unreadable.
func readFields(path string) map[string]bool {
	set := map[string]bool{}
	data, err := os.ReadFile(path)
	if err != nil {
		return set
	}
	for _, w := range strings.Fields(string(data)) {
		set[w] = true
	}
	return set
}

// readKey returns the value of "key N" in a flat-keyed file such as memory.events.
func readKey(path, key string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readPids lists cgroup.procs; ENOENT yields none.
func readPids(dir string) ([]int, error) {
	p := filepath.Join(dir, "cgroup.procs")
	data, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("cgroup: read %s: %w", p, err)
	}
	var pids []int
	for _, w := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(w); err == nil && n > 0 {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// killAll sends SIGKILL to everything in dir (not its children).
func killAll(dir string) {
	// cgroup.kill (v2, Linux 5.14+) is atomic against forks; fall back to chasing pids.
	if err := writeFile(dir, "cgroup.kill", "1"); err == nil {
		return
	}
	pids, err := readPids(dir)
	if err != nil || len(pids) == 0 {
		return
	}
	// Pin each process with a pidfd, then re-read the member list: a pid that is still a member
	// after the pidfd was opened is the process the pidfd names, so a recycled pid belonging to
	// someone else is never signalled.
	fds := map[int]int{}
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) {
				// Kernels before 5.3: plain kill is the only option.
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			continue
		}
		fds[pid] = fd
	}
	still, _ := readPids(dir)
	for _, pid := range still {
		if fd, ok := fds[pid]; ok {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// removeTree kills every process in dir and its sub-cgroups and removes them, bottom up.
// A missing dir is not an error, which makes removal idempotent.
func removeTree(dir string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("cgroup: remove %s: nested deeper than %d", dir, maxDepth)
	}
	delay := time.Millisecond
	for attempt := 1; ; attempt++ {
		// Kill first so nothing inside can create new sub-cgroups while we descend.
		killAll(dir)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		var childErr error
		for _, e := range entries {
			if e.IsDir() {
				if err := removeTree(filepath.Join(dir, e.Name()), depth+1); err != nil && childErr == nil {
					childErr = err
				}
			}
		}
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		// EBUSY: processes are still exiting (or were just forked); anything else is final.
		if !errors.Is(err, unix.EBUSY) || attempt >= removeAttempts {
			if childErr != nil {
				return childErr
			}
			return fmt.Errorf("cgroup: rmdir %s: %w", dir, err)
		}
		time.Sleep(delay)
		delay = min(2*delay, maxRetryDelay)
	}
}

// isPerm reports errors meaning "this user may not", which degrade a limit rather than fail.
func isPerm(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS)
}

package cgroup

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SweepStale removes empty groups named prefix+PID (or prefix+PID-N) below
// the caller's own cgroup dirs whose PID no longer exists: what a sandbox owner killed
// outright (no Close, no state record for prune) left behind. A group that
// still holds a process is not stale, and rmdir refuses it. It returns how
// many it removed.
func SweepStale(prefix string) int {
	lay, err := discover()
	if err != nil {
		return 0
	}
	parents := map[string]bool{}
	for _, d := range lay.v1 {
		parents[d] = true
	}
	if lay.v2 != "" {
		parents[lay.v2] = true
	}
	n := 0
	for p := range parents {
		dirs, _ := filepath.Glob(filepath.Join(p, prefix+"*"))
		for _, d := range dirs {
			owner, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), prefix), "-")
			pid, err := strconv.Atoi(owner)
			if err != nil || pid <= 0 {
				continue
			}
			if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
				continue // alive, or not ours to judge
			}
			if unix.Rmdir(d) == nil {
				n++
			}
		}
	}
	return n
}

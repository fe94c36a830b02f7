// Package cgroup puts a sandbox in its own cgroup with memory, CPU and process-count limits.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnavailable means no writable cgroup offers the controllers the limits need.
var ErrUnavailable = errors.New("cgroup: no usable cgroup")

const (
	cpuPeriod   = 100000 // µs; the kernel default, so quotas read naturally
	minCPUQuota = 1000   // µs; the kernel rejects smaller quotas
	maxCPUs     = 1 << 20
)

// Limits are the resources one sandbox may use.
type Limits struct {
	MemoryBytes int64   // 0 = no limit; also forbids swap beyond it where the kernel allows
	CPUs        float64 // 0 = no limit; 1.5 = one and a half CPUs (cfs quota/period or cpu.max)
	Pids        int64   // 0 = no limit
}

// Group is one sandbox's cgroup (one dir on v2, one dir per controller on v1).
// It is not safe for concurrent use.
type Group struct {
	version    int
	dirs       []string          // dirs we created, in creation order
	ctrl       map[string]string // controller -> dir where it applies
	unenforced []string          // requested limits that are not enforced
	reasons    []string          // why a controller is unusable, "name: why"
}

// New creates a child cgroup named name (e.g. "airlock-<id>") under the calling process's own
// cgroup in each hierarchy it uses (so a parent's limits still apply), and writes the limits.
// A limit whose controller is missing or not writable is skipped and listed by Unenforced.
// It returns ErrUnavailable (wrapped, with a reason a user can act on) when no writable cgroup
// with the needed controllers exists, e.g. an unprivileged user without delegation.
func New(name string, l Limits) (*Group, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("cgroup: invalid group name %q", name)
	}
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUs < 0 || math.IsNaN(l.CPUs) || l.CPUs > maxCPUs {
		return nil, fmt.Errorf("cgroup: invalid limits %+v", l)
	}
	lay, err := discover()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return create(lay, name, l)
}

func create(lay layout, name string, l Limits) (*Group, error) {
	switch lay.version() {
	case 1:
		return newV1(lay, name, l)
	case 2:
		return newV2(lay, name, l)
	}
	return nil, unavailable([]string{"no cgroup filesystem shows this process's cgroup (" + lay.v2Why + ")"})
}

// mkdirGroup makes the group dir. One that exists and is empty is a
// leftover: airlock names groups after a live process (a guest, a
// supervisor), so it belonged to a namesake that died before removing it (a
// supervisor killed during its start); it is removed and made again rather
// than failing every later sandbox whose process gets that pid. Where this
// user may not remove it, it could not make groups here either: the error
// says so (and the group is skipped like any unwritable one).
func mkdirGroup(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	switch rerr := unix.Rmdir(dir); rerr {
	case nil:
		return os.Mkdir(dir, 0o755)
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return &fs.PathError{Op: "mkdir", Path: dir, Err: rerr}
	}
	return err
}

// requested lists the controllers the limits need.
func requested(l Limits) map[string]bool {
	return map[string]bool{"memory": l.MemoryBytes > 0, "cpu": l.CPUs > 0, "pids": l.Pids > 0}
}

func cpuQuota(cpus float64) int64 {
	return max(int64(math.Round(cpus*cpuPeriod)), minCPUQuota)
}

func newV1(lay layout, name string, l Limits) (*Group, error) {
	g := &Group{version: 1, ctrl: map[string]string{}}
	req := requested(l)
	// Every hierarchy gets a group, even without a limit, so Destroy finds all processes.
	for _, c := range controllers {
		parent, ok := lay.v1[c]
		if !ok {
			g.degrade(c, req[c], lay.missing[c])
			continue
		}
		dir := filepath.Join(parent, name)
		if !slices.Contains(g.dirs, dir) { // hierarchies may share controllers (cpu,cpuacct)
			if err := mkdirGroup(dir); err != nil {
				if errors.Is(err, fs.ErrExist) {
					_ = g.Destroy()
					return nil, fmt.Errorf("cgroup: mkdir %s: %w", dir, err)
				}
				g.degrade(c, req[c], fmt.Sprintf("cannot create %s: %v", dir, errnoOf(err)))
				continue
			}
			g.dirs = append(g.dirs, dir)
		}
		g.ctrl[c] = dir
	}
	if len(g.dirs) == 0 {
		return nil, unavailable(g.reasons)
	}
	err := g.apply("memory", l.MemoryBytes > 0, func(dir string) error {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		if err := writeFile(dir, "memory.limit_in_bytes", v); err != nil {
			return err
		}
		// memsw must be >= limit_in_bytes, hence second; absent when swap accounting is off.
		return writeOptional(dir, "memory.memsw.limit_in_bytes", v)
	})
	if err == nil {
		err = g.apply("cpu", l.CPUs > 0, func(dir string) error {
			if err := writeFile(dir, "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
				return err
			}
			return writeFile(dir, "cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(l.CPUs), 10))
		})
	}
	if err == nil {
		err = g.apply("pids", l.Pids > 0, func(dir string) error {
			return writeFile(dir, "pids.max", strconv.FormatInt(l.Pids, 10))
		})
	}
	return g.finish(req, err)
}

func newV2(lay layout, name string, l Limits) (*Group, error) {
	g := &Group{version: 2, ctrl: map[string]string{}}
	req := requested(l)
	parent := lay.v2
	dir := filepath.Join(parent, name)
	if err := mkdirGroup(dir); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup: mkdir %s: %w", dir, err)
		}
		return nil, unavailable([]string{fmt.Sprintf("cannot create %s: %v", dir, errnoOf(err))})
	}
	g.dirs = []string{dir}
	avail := readFields(filepath.Join(parent, "cgroup.controllers"))
	enabled := readFields(filepath.Join(parent, "cgroup.subtree_control"))
	for _, c := range controllers {
		if !req[c] {
			continue
		}
		switch {
		case !avail[c]:
			g.degrade(c, true, fmt.Sprintf("controller not available in %s (not enabled or delegated by its parent)", parent))
			continue
		case enabled[c]:
		default:
			err := writeFile(parent, "cgroup.subtree_control", "+"+c)
			if errors.Is(err, unix.EBUSY) {
				// Moving the caller into a leaf to dodge this would surprise it; say so instead.
				g.degrade(c, true, fmt.Sprintf("cannot enable it for children of %s: that cgroup has processes of its own "+
					"(cgroup v2 \"no internal processes\" rule); run airlock from a cgroup whose parent holds no processes", parent))
				continue
			}
			if err != nil {
				g.degrade(c, true, err.Error())
				continue
			}
		}
		g.ctrl[c] = dir
	}
	err := g.apply("memory", l.MemoryBytes > 0, func(dir string) error {
		if err := writeFile(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		if err := writeOptional(dir, "memory.swap.max", "0"); err != nil {
			return err
		}
		// Kill the whole sandbox on OOM rather than leave it half-alive.
		return writeOptional(dir, "memory.oom.group", "1")
	})
	if err == nil {
		err = g.apply("cpu", l.CPUs > 0, func(dir string) error {
			return writeFile(dir, "cpu.max", fmt.Sprintf("%d %d", cpuQuota(l.CPUs), cpuPeriod))
		})
	}
	if err == nil {
		err = g.apply("pids", l.Pids > 0, func(dir string) error {
			return writeFile(dir, "pids.max", strconv.FormatInt(l.Pids, 10))
		})
	}
	return g.finish(req, err)
}

// apply writes one controller's limit. A permission error or a missing file (controller off)
// degrades that limit only; anything else (say, a quota above the parent's) is a real error.
func (g *Group) apply(c string, want bool, write func(dir string) error) error {
	dir, ok := g.ctrl[c]
	if !want || !ok {
		return nil
	}
	err := write(dir)
	if err != nil && (isPerm(err) || errors.Is(err, fs.ErrNotExist)) {
		delete(g.ctrl, c)
		g.degrade(c, true, err.Error())
		return nil
	}
	return err
}

// finish undoes a failed New, and refuses a group that enforces none of the requested limits.
func (g *Group) finish(req map[string]bool, err error) (*Group, error) {
	if err != nil {
		_ = g.Destroy()
		return nil, err
	}
	anyReq, anyOK := false, false
	for _, c := range controllers {
		if req[c] {
			anyReq = true
			if !slices.Contains(g.unenforced, c) {
				anyOK = true
			}
		}
	}
	if anyReq && !anyOK {
		_ = g.Destroy()
		return nil, unavailable(g.reasons)
	}
	return g, nil
}

func (g *Group) degrade(c string, requested bool, why string) {
	g.reasons = append(g.reasons, c+": "+why)
	if requested && !slices.Contains(g.unenforced, c) {
		g.unenforced = append(g.unenforced, c)
	}
}

func unavailable(reasons []string) error {
	hint := ""
	if os.Geteuid() != 0 {
		hint = " (as a non-root user this needs a cgroup delegated to you, e.g. via systemd's Delegate=yes)"
	}
	return fmt.Errorf("%w: %s%s", ErrUnavailable, strings.Join(reasons, "; "), hint)
}

// errnoOf strips *fs.PathError so reasons do not repeat the path they already name.
func errnoOf(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Add moves a process (all its threads) into the group.
func (g *Group) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: invalid pid %d", pid)
	}
	for _, dir := range g.dirs {
		if err := writeFile(dir, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Version is 1 or 2.
func (g *Group) Version() int { return g.version }

// Paths lists the group's dirs, to record for Remove after a crash.
func (g *Group) Paths() []string { return slices.Clone(g.dirs) }

// Unenforced names the requested limits ("memory", "cpu", "pids") that are not enforced
// because their controller is missing or not writable; Probe explains why.
func (g *Group) Unenforced() []string { return slices.Clone(g.unenforced) }

// OOMKilled reports, best effort, whether the memory limit killed a process. Call it before
// Destroy, which removes the counters.
func (g *Group) OOMKilled() bool {
	dir, ok := g.ctrl["memory"]
	if !ok {
		return false
	}
	if g.version == 2 {
		n, _ := readKey(filepath.Join(dir, "memory.events"), "oom_kill")
		return n > 0
	}
	if n, ok := readKey(filepath.Join(dir, "memory.oom_control"), "oom_kill"); ok {
		return n > 0
	}
	// Kernels before 4.13 lack the oom_kill count; hitting the limit is the best hint left.
	data, err := os.ReadFile(filepath.Join(dir, "memory.failcnt"))
	if err != nil {
		return false
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n > 0
}

// Destroy kills whatever is left in the group and removes its dirs. It is idempotent.
func (g *Group) Destroy() error {
	if g == nil {
		return nil
	}
	// A group whose processes are all gone (a sandbox whose PID 1 was
	// reaped) goes with one rmdir per hierarchy: its member lists need not
	// be read (in v1 each read builds a pid list the kernel frees later).
	// rmdir removes only an empty group; what it refuses is killed and
	// removed below.
	var left []string
	for _, dir := range slices.Backward(g.dirs) {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			left = append(left, dir)
		}
	}
	// Kill in every hierarchy before removing any, so no v1 dir waits on another's processes.
	for _, dir := range left {
		killAll(dir)
	}
	var errs []error
	for _, dir := range left {
		errs = append(errs, removeTree(dir, 0))
	}
	return errors.Join(errs...)
}

// Remove deletes cgroup dirs left by a crashed sandbox (given the Paths() recorded earlier):
// kill + rmdir, ignoring ones already gone. Since recorded paths come from a state file, it
// refuses anything that is not a cgroup below a hierarchy root or that holds the caller.
func Remove(paths []string) error {
	lay, err := discover()
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		if err := removeStale(p, lay); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeStale(p string, lay layout) error {
	p, err := checkStale(p, lay)
	if err != nil || p == "" {
		return err
	}
	return removeTree(p, 0)
}

// checkStale vets a recorded path before anything in it is killed; "" means already gone.
func checkStale(p string, lay layout) (string, error) {
	if !filepath.IsAbs(p) || slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("cgroup: remove %q: not a clean absolute path", p)
	}
	p = filepath.Clean(p)
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", fmt.Errorf("cgroup: statfs %s: %w", p, err)
	}
	if st.Type != unix.CGROUP_SUPER_MAGIC && st.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", fmt.Errorf("cgroup: remove %s: not on a cgroup filesystem", p)
	}
	if lay.roots[p] {
		return "", fmt.Errorf("cgroup: remove %s: refusing a hierarchy root", p)
	}
	for _, o := range lay.own {
		if within(o, p) {
			return "", fmt.Errorf("cgroup: remove %s: it contains this process's cgroup %s", p, o)
		}
	}
	return p, nil
}

// Support says which limits this user can enforce, for `airlock doctor`.
type Support struct {
	Version           int // 1 or 2; 0 when no cgroup filesystem is usable
	Memory, CPU, Pids bool
	Reason            string // why some limit is not enforceable; empty when all are
}

// Probe reports what this user can use by creating and removing an empty trial group.
func Probe() Support {
	lay, err := discover()
	if err != nil {
		return Support{Reason: err.Error()}
	}
	s := Support{Version: lay.version()}
	name := fmt.Sprintf("airlock-probe-%d-%d", os.Getpid(), time.Now().UnixNano())
	// Tiny values are fine: the group stays empty, and they never exceed a parent's limits.
	g, err := create(lay, name, Limits{MemoryBytes: 16 << 20, CPUs: 0.01, Pids: 16})
	if err != nil {
		s.Reason = err.Error()
		return s
	}
	s.Version = g.version
	s.Memory = !slices.Contains(g.unenforced, "memory")
	s.CPU = !slices.Contains(g.unenforced, "cpu")
	s.Pids = !slices.Contains(g.unenforced, "pids")
	s.Reason = strings.Join(g.reasons, "; ")
	if err := g.Destroy(); err != nil {
		s.Reason = strings.TrimPrefix(s.Reason+"; "+err.Error(), "; ")
	}
	return s
}

// Unified reports whether this process lives in cgroup v2 alone, where New
// makes v2 groups: groups a child can be cloned straight into (OpenDir).
// It reads one small file, as it runs before every sandbox's clone; a
// hybrid host (v1 controllers beside a v2 mount) reports false.
func Unified() bool {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return false
	}
	v1, _, hasV2 := parseProcCgroup(b)
	return hasV2 && len(v1) == 0
}

// OpenDir opens a v2 group's directory for clone(2)'s CLONE_INTO_CGROUP
// (syscall.SysProcAttr.CgroupFD). A process born in its group is never
// moved: moving one takes a lock whose writer first waits for an RCU grace
// period, measured at 7–12 ms on a busy 2-CPU machine.
func (g *Group) OpenDir() (*os.File, error) {
	if g.version != 2 || len(g.dirs) != 1 {
		return nil, errors.New("cgroup: only a v2 group can be cloned into")
	}
	return os.OpenFile(g.dirs[0], os.O_RDONLY|unix.O_DIRECTORY, 0)
}

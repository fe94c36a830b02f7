package native

// spawnAttr says how to start a process with spawn.
type spawnAttr struct {
	Path    string
	Argv    []string
	Env     []string
	Files   []int  // Files[i] becomes the child's descriptor i
	Flags   uint64 // namespace flags (CLONE_NEW*)
	Cgroup  int    // a cgroup dir to start in (CLONE_INTO_CGROUP); -1: the parent's
	LastCap int    // the highest capability this kernel knows
	// Maps writes the child's id maps (/proc/PID/...) while it waits.
	Maps func(pid int) error
	// SetIDs makes the child uid and gid 0 with no groups once mapped.
	SetIDs bool
}

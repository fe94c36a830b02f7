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
}

package engine

import "github.com/airlock-dev/airlock/internal/cgroup"

// removeCgroups removes a sandbox's cgroups (see Remove).
func removeCgroups(paths []string) error { return cgroup.Remove(paths) }

package backend

import (
	"debug/elf"
	"fmt"
	"path/filepath"
)

// CheckStatic refuses a dynamically linked airlock binary for a backend
// (named by who) that runs it inside a root of its own (a docker image, a
// VM's initramfs): it would need the host's loader and libc there.
func CheckStatic(who, exe string) error {
	f, err := elf.Open(exe)
	if err != nil {
		return fmt.Errorf("%s: read the airlock binary %s: %w", who, exe, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			if real, err := filepath.EvalSymlinks(exe); err == nil {
				exe = real // /proc/self/exe names nothing to rebuild
			}
			return fmt.Errorf("%s: the airlock binary %s is dynamically linked and cannot run inside the sandbox's own root: build it with CGO_ENABLED=0", who, exe)
		}
	}
	return nil
}

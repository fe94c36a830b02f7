// Package fullbin holds the full airlock binary inside the lean front, the
// airlock binary users build (cmd/airlock with the tag airlock_front; see
// its front.go): the front runs native sandboxes without the libraries
// only the rest needs, whose package initialisers every start would pay,
// and executes this for everything else. It runs from a file cached once
// under the state root, which no sandbox sees. A front built without `go
// generate ./internal/fullbin` holds none, and says so when it would run it.
package fullbin

//go:generate go generate ../guestbin
//go:generate go run ./gen

import (
	"embed"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/embedbin"
)

// bin holds the generated airlock and airlock.id, or only the committed README.
//
//go:embed all:bin
var bin embed.FS

var full = &embedbin.Bin{FS: bin, File: "bin/airlock", Generate: "go generate ./internal/fullbin"}

// Exec executes the full binary, cached under dir (written there first if
// needed; see embedbin.Bin.Open), in this process's place, with argv and
// env. It returns only on failure.
func Exec(dir string, argv, env []string) error {
	fd, err := full.Open(dir)
	if err != nil {
		return fmt.Errorf("the full airlock binary: %w", err)
	}
	// Checked on the descriptor, executed by name: /proc/self/exe then
	// names it (what a detached sandbox's supervisor is started as), and so
	// does ps (a descriptor's path would show as its number).
	unix.Close(fd)
	path := full.CachePath(dir)
	return fmt.Errorf("the full airlock binary: exec %s: %w", path, syscall.Exec(path, argv, env))
}

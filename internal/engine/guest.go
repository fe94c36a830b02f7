package engine

import (
	"fmt"
	"strings"

	"path/filepath"

	"github.com/airlock-dev/airlock/internal/guestbin"
	"github.com/airlock-dev/airlock/internal/state"
)

// guestCache is where the native guest built into this binary (see
// internal/guestbin) is kept to be executed, when exe (the guest binary
// asked for) is this program: under the state root, which no sandbox sees
// (backendSpec hides it).
func guestCache(exe string) string {
	if exe != "" {
		return ""
	}
	root, err := state.Root()
	if err != nil {
		return ""
	}
	return filepath.Join(root, "guest")
}

// GuestCheck is `airlock doctor`'s row for the native backend's guest (the
// sandbox's PID 1): the lean build this binary holds, or why this binary
// is re-executed instead (impact says what that costs).
func GuestCheck() (lean bool, detail, impact string) {
	if why := guestbin.Missing(); why != "" {
		return false, "this binary, re-executed: the lean guest is " + why,
			"every native sandbox's start pays this binary's own start-up a second time (2-3 ms here): build with `go generate ./internal/guestbin` first"
	}
	dir := guestCache("")
	if dir == "" {
		return false, "this binary, re-executed: no state dir to keep the lean guest in", "every native sandbox's start pays this binary's own start-up a second time (2-3 ms here): set AIRLOCK_STATE_DIR"
	}
	sum, target, _ := strings.Cut(guestbin.ID(), " ")
	return true, fmt.Sprintf("lean build %.12s (%s), run from %s", sum, target, guestbin.CachePath(dir)), ""
}

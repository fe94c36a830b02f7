// Package supervisor runs one sandbox for the CLI: it starts the backend,
// registers the sandbox in the state dir, runs its main command with the
// user's terminal or stdio, serves the control socket that `airlock exec`,
// `kill` and others use, and cleans up whatever way the sandbox ends.
package supervisor

import (
	"time"

	"github.com/airlock-dev/airlock/internal/backend/native"
)

// Spec is everything a supervisor needs; a detached sandbox's background
// supervisor reads it back from the state dir.
type Spec struct {
	Native  native.Config `json:"native"`
	Backend string        `json:"backend,omitempty"` // BackendNative ("" too) or BackendDocker
	Image   string        `json:"image,omitempty"`   // docker: the image (default DefaultImage)
	Network NetworkSpec   `json:"network,omitempty"`
	// Workspace is how the workspace is shown inside and reviewed after.
	Workspace WorkspaceSpec `json:"workspace,omitempty"`
	Command   []string      `json:"command,omitempty"` // empty: an idle sandbox (detached only)
	Env       []string      `json:"env"`               // the sandbox's environment
	TTY       bool          `json:"tty,omitempty"`
	Timeout   time.Duration `json:"timeout,omitempty"`
	Detached  bool          `json:"detached,omitempty"`
	Quiet     bool          `json:"quiet,omitempty"`
}

// Exit codes airlock itself uses, as docker and timeout(1) do.
const (
	ExitAirlock = 125 // airlock failed, not the command
	ExitTimeout = 124 // --timeout ended the sandbox
)

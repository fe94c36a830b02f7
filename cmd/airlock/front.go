//go:build airlock_front

package main

// The lean front: cmd/airlock built with the tag airlock_front, the airlock
// binary README's build makes. It holds what an agent harness calls over
// and over (run, exec, ls and the like, a detached run's supervisor, a
// sandbox's PID 1 and hostexec), for native sandboxes without MCP servers,
// and none of the libraries only the rest needs (the Docker client, the
// MCP SDK, go-fuse), whose package initialisers every start would pay (~5%
// of a run here). For anything else it executes the full binary it holds
// (internal/fullbin) with the same arguments: another command, or a run
// that needs the docker or vm backend or MCP servers, decided once its
// config is read and before anything of the sandbox is made.

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/fullbin"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/supervisor"
)

// subcommands are the front's commands: those an agent harness calls over
// and over, each of which touches no backend but the native one.
var subcommands = []subcommand{
	{"run", newRunCmd}, {"exec", newExecCmd}, {"ls", newLsCmd}, {"get", newGetCmd}, {"logs", newLogsCmd},
	{"kill", newKillCmd}, {"hostexec", newHostexecCmd}, {"version", newVersionCmd},
}

// vmInit: a VM's /init is the full binary.
func vmInit() {}

// handOn executes the full binary in this process's place with args (this
// process's own arguments, or what they mean), cached under the state root,
// which no sandbox sees. It returns only if that fails, having said why.
func handOn(args []string) (code int, handed bool) {
	switch {
	case filepath.Base(os.Args[0]) == "mcp-bridge":
		// Run inside a sandbox by that name: one with MCP servers was started
		// by the full binary, which it shows there in this one's place.
		fmt.Fprintln(os.Stderr, "airlock: mcp-bridge: this sandbox has no MCP servers")
		return supervisor.ExitAirlock, true
	case os.Getenv("AIRLOCK_SANDBOX") != "":
		// Inside, the state root would be the sandbox's own: the full binary
		// would be written there, for nothing a sandbox may do.
		fmt.Fprintln(os.Stderr, "airlock: this command needs the full airlock binary, which is not available inside a sandbox")
		return supervisor.ExitAirlock, true
	}
	root, err := state.Root()
	if err == nil {
		err = fullbin.Exec(filepath.Join(root, "full"), append([]string{os.Args[0]}, args...), os.Environ())
	}
	fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
	return supervisor.ExitAirlock, true
}

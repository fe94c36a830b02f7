// The runtime's GOMAXPROCS updater is a goroutine started before main, whose
// start wakes a second OS thread while the binary is still faulting its
// pages in, and which rereads the cgroup's CPU limit every second after.
// GOMAXPROCS is still set from the CPU limit at start; only a limit
// changed while airlock runs goes unseen.
//
//go:debug updatemaxprocs=0

// Command airlock runs AI coding agents and the code they write in a sandbox.
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/supervisor"
	"github.com/airlock-dev/airlock/internal/trace"
)

func main() {
	// Nothing of airlock's logs through the standard logger; libraries that
	// do (go-fuse, when a VM's file session ends) must not write over a
	// sandbox's terminal.
	log.SetOutput(io.Discard)
	vmInit()
	// Inside a sandbox the binary also answers to the names it is shown
	// under (/run/airlock/bin): hostexec CMD ARGS..., mcp-bridge NAME.
	if name := filepath.Base(os.Args[0]); name == "hostexec" || name == "mcp-bridge" {
		os.Exit(execute(append([]string{name}, os.Args[1:]...)))
	}
	// The same binary is a sandbox's PID 1 (docker, and native when no lean
	// guest is built in: internal/guestbin/lean does the same) and a
	// detached sandbox's background supervisor; both skip the CLI entirely.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "guest":
			trace.As("guest")
			trace.MarkCPU("main")
			guestMain()
		case superviseCmd:
			trace.As("supervise")
			os.Exit(supervisor.Serve(os.Args[2:], superviseCmd))
		case "--rpc": // the ADR's spelling of `airlock rpc`
			os.Args[1] = "rpc"
		}
	}
	trace.MarkCPU("main")
	code := execute(os.Args[1:])
	trace.MarkCPU("exit")
	os.Exit(code)
}

// named is the subcommand args run when their first word names one exactly
// (no alias, no flag before it), else "": then the whole tree is built, for
// help, suggestions and aliases.
func named(args []string) string {
	if len(args) == 0 {
		return ""
	}
	for _, sc := range subcommands {
		if sc.name == args[0] {
			return sc.name
		}
	}
	return ""
}

// exitError carries a command's exit status through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake in how airlock was called.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func execute(args []string) int {
	root := newRootCmd(named(args))
	root.SetArgs(args)
	err := root.Execute()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			if cmd, _, ferr := root.Find(args); ferr == nil && cmd != root {
				fmt.Fprintf(os.Stderr, "See '%s --help'.\n", cmd.CommandPath())
			} else {
				fmt.Fprintln(os.Stderr, "See 'airlock --help'.")
			}
		}
		return supervisor.ExitAirlock
	}
}

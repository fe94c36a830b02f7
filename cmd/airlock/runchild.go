package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-dev/airlock/internal/childspec"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/trace"
)

// runChild is `airlock run --spec-fd N`: a sandbox airlock starts for its
// own use (internal/childspec), its whole spec read from descriptor N and
// then checked, completed and launched as any run's (runSpec, launch).
// No other flag and no command line: the spec says everything, and no
// config file is read beside it.
func runChild(c *cobra.Command, o *runOptions, args []string) error {
	var other []string
	c.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "spec-fd" {
			other = append(other, "--"+f.Name)
		}
	})
	if len(other) > 0 || len(args) > 0 {
		return usageError{fmt.Sprintf("--spec-fd takes the whole spec: no other flag (%v) and no command (%q)", other, args)}
	}
	if o.specFD < 3 {
		return usageError{fmt.Sprintf("--spec-fd %d: give the descriptor (3 or more) that holds the spec", o.specFD)}
	}
	f := os.NewFile(uintptr(o.specFD), "spec")
	if f == nil {
		return usageError{fmt.Sprintf("--spec-fd %d: not a descriptor", o.specFD)}
	}
	cs, err := childspec.Read(f)
	f.Close() // the sandbox must not inherit it
	if err != nil {
		return usageError{err.Error()}
	}
	trace.Mark("cli parsed")
	ws, err := resolveWorkspace(cs.Config.Workspace.Path)
	if err != nil {
		return err
	}
	l, err := config.LoadSpec(config.Options{Workspace: ws, NoFiles: true}, cs.Config)
	if err != nil {
		return err
	}
	// What the parent hides (an MCP server's sandbox: the host's secret
	// files) is absolute paths, which filesystem.hide takes as they are.
	l.Spec.Filesystem.Hide = append(l.Spec.Filesystem.Hide, cs.Hide...)
	trace.Mark("config read")
	co := &runOptions{name: cs.Name, quiet: cs.Quiet, workdir: cs.Workdir, noConfig: true, specFD: o.specFD}
	spec, err := runSpec(l, co, cs.Command)
	if err != nil {
		return err
	}
	trace.Mark("spec made")
	code, err := launch(spec, co, l.Spec.Env, nil)
	if err != nil {
		return err
	}
	return exitError{code}
}

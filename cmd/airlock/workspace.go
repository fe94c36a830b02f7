package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// openSession finds a sandbox's workspace session.
func openSession(ref string) (state.Entry, *workspace.Session, error) {
	e, err := resolve(ref)
	if err != nil {
		return e, nil, err
	}
	s, err := workspace.Open(engine.WorkspaceDir(e.Dir))
	if errors.Is(err, fs.ErrNotExist) {
		return e, nil, fmt.Errorf("sandbox %s has no workspace record (it started before airlock kept them, or its start failed)", ref)
	}
	return e, s, err
}

// diffOptions is what airlock diff needs.
type diffOptions struct {
	IO  *ioStreams
	Ref string // the sandbox's ID or name
	// At most one of these: the change set as one line per path, as
	// paths only, or as JSON (none: a full diff).
	Stat, NameOnly, JSON bool
	// Open finds a sandbox's workspace session.
	Open func(ref string) (state.Entry, *workspace.Session, error)
}

func newDiffCmd(runF func(*diffOptions) error) *cobra.Command {
	o := &diffOptions{IO: systemIO(), Open: openSession}
	c := &cobra.Command{
		Use:   "diff ID|NAME [--stat|--name-only|--json]",
		Short: "Show what a sandbox changed in its workspace",
		Long: `Show what a sandbox changed in its workspace: a unified diff for text,
sizes and hashes for binaries, and each risky change with its reason.

For overlay and copy sandboxes this is what airlock apply would carry over
(it works while the sandbox runs, too). For bind sandboxes the changes are
already in place and only their names, sizes and hashes were kept.`,
		Args: oneArg("sandbox ID or name"),
		RunE: func(c *cobra.Command, args []string) error {
			if boolCount(o.Stat, o.NameOnly, o.JSON) > 1 {
				return usageError{"--stat, --name-only and --json do not mix"}
			}
			o.Ref = args[0]
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return diffRun(o)
		},
	}
	c.Flags().BoolVar(&o.Stat, "stat", false, "one line per path")
	c.Flags().BoolVar(&o.NameOnly, "name-only", false, "paths only")
	c.Flags().BoolVar(&o.JSON, "json", false, "the change set as JSON")
	return c
}

func diffRun(o *diffOptions) error {
	_, s, err := o.Open(o.Ref)
	if err != nil {
		return err
	}
	cs, err := s.Changes()
	if err != nil {
		return err
	}
	switch {
	case o.JSON:
		if cs == nil {
			cs = []workspace.Change{}
		}
		return writeJSON(o.IO.Out, struct {
			Mode      workspace.Mode     `json:"mode"`
			Workspace string             `json:"workspace"`
			Changes   []workspace.Change `json:"changes"`
		}{s.Mode(), s.Root(), cs})
	case o.Stat:
		return s.WriteDiff(o.IO.Out, cs, workspace.DiffStat)
	case o.NameOnly:
		return s.WriteDiff(o.IO.Out, cs, workspace.DiffNameOnly)
	}
	return s.WriteDiff(o.IO.Out, cs, workspace.DiffFull)
}

func boolCount(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// applyOptions is what airlock apply needs.
type applyOptions struct {
	IO    *ioStreams
	Ref   string   // the sandbox's ID or name
	Paths []string // only the changes at or below these
	Yes   bool     // apply without asking
	Risky bool     // with Yes: risky changes too
	// Terminal says whether In is a terminal to ask on.
	Terminal bool
	// Open finds a sandbox's workspace session.
	Open func(ref string) (state.Entry, *workspace.Session, error)
}

func newApplyCmd(runF func(*applyOptions) error) *cobra.Command {
	o := &applyOptions{IO: systemIO(), Open: openSession}
	c := &cobra.Command{
		Use:   "apply ID|NAME [PATHS...] [--yes] [--risky]",
		Short: "Carry an overlay or copy sandbox's changes into the workspace",
		Long: `Carry a stopped overlay or copy sandbox's changes into its workspace: all of
them, or those at or below PATHS. Each file is replaced atomically (a temp
file, then a rename); nothing follows a symlink; modes are kept; a file
changed on the host since the sandbox started is left alone and named. If a
write fails (a full disk), nothing is applied and the changes stay for
another try.

On a terminal, airlock lists risky changes and asks. Without one, pass
--yes. Risky changes (git hooks and config, CI, build scripts, editor and
agent settings, new executables, links out of the workspace) are applied
only when named in PATHS or with --risky.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{"expected a sandbox: airlock apply ID|NAME [PATHS...]"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.Ref, o.Paths = args[0], args[1:]
			o.IO.Out, o.IO.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			o.Terminal = term.IsTerminal(int(os.Stdin.Fd()))
			if runF != nil {
				return runF(o)
			}
			return applyRun(o)
		},
	}
	c.Flags().BoolVarP(&o.Yes, "yes", "y", false, "apply without asking")
	c.Flags().BoolVar(&o.Risky, "risky", false, "with --yes: apply risky changes too")
	return c
}

func applyRun(o *applyOptions) error {
	e, s, err := o.Open(o.Ref)
	if err != nil {
		return err
	}
	if e.Status.State == state.Running {
		return fmt.Errorf("sandbox %s is running: stop it first (airlock kill %s), so its changes stop moving", o.Ref, o.Ref)
	}
	if s.Mode() == workspace.Bind {
		return fmt.Errorf("sandbox %s used the workspace itself (bind mode): its changes are already there", o.Ref)
	}
	cs, err := s.Changes()
	if err != nil {
		return err
	}
	cs = selectPaths(cs, s.Root(), o.Paths)
	out := o.IO.ErrOut
	if workspace.Count(cs).Applicable() == 0 {
		fmt.Fprintln(o.IO.Out, "nothing to apply")
		return nil
	}
	if !o.Yes {
		if !o.Terminal {
			return usageError{"not a terminal to ask on: pass --yes to apply (risky changes also need --risky or their PATHS)"}
		}
		res, ok, err := s.Interactive(o.IO.In, out, o.IO.Out, "", cs)
		if ok {
			workspace.WriteResult(out, "", s.Root(), res)
		}
		return err
	}
	plain, riskyCs := workspace.SplitRisky(cs)
	todo := plain
	if o.Risky || len(o.Paths) > 0 {
		todo = append(todo, riskyCs...)
	} else if len(riskyCs) > 0 {
		workspace.WriteFindings(out, "", riskyCs)
		defer fmt.Fprintf(out, "held back %d risky change(s): name them, or pass --risky\n", len(riskyCs))
	}
	res, err := s.Apply(todo)
	workspace.WriteResult(out, "", s.Root(), res)
	if err != nil {
		return fmt.Errorf("%v; the sandbox's changes are kept: fix the cause and run airlock apply %s again", err, o.Ref)
	}
	return nil
}

// selectPaths keeps changes at or below the named paths (absolute, or
// relative to the workspace).
func selectPaths(cs []workspace.Change, root string, named []string) []workspace.Change {
	if len(named) == 0 {
		return cs
	}
	var rels []string
	for _, n := range named {
		if path.IsAbs(n) {
			n = strings.TrimPrefix(strings.TrimPrefix(path.Clean(n), root), "/")
		}
		rels = append(rels, strings.Trim(path.Clean(n), "/"))
	}
	var out []workspace.Change
	for _, c := range cs {
		for _, r := range rels {
			if r == "." || r == "" || c.Path == r || strings.HasPrefix(c.Path, r+"/") {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// discardOptions is what airlock discard needs.
type discardOptions struct {
	IO  *ioStreams
	Ref string // the sandbox's ID or name
	// Open finds a sandbox's workspace session.
	Open func(ref string) (state.Entry, *workspace.Session, error)
}

func newDiscardCmd(runF func(*discardOptions) error) *cobra.Command {
	o := &discardOptions{IO: systemIO(), Open: openSession}
	return &cobra.Command{
		Use:   "discard ID|NAME",
		Short: "Throw away an overlay or copy sandbox's workspace changes",
		Args:  oneArg("sandbox ID or name"),
		RunE: func(c *cobra.Command, args []string) error {
			o.Ref = args[0]
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return discardRun(o)
		},
	}
}

func discardRun(o *discardOptions) error {
	e, s, err := o.Open(o.Ref)
	if err != nil {
		return err
	}
	if e.Status.State == state.Running {
		return fmt.Errorf("sandbox %s is running: stop it first (airlock kill %s)", o.Ref, o.Ref)
	}
	if s.Mode() == workspace.Bind {
		return fmt.Errorf("sandbox %s used the workspace itself (bind mode): there is nothing to discard", o.Ref)
	}
	if err := s.Discard(); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Out, "discarded the changes of %s\n", e.Record.ID)
	return nil
}

// pendingChanges says whether a stopped sandbox still holds changes to review.
func pendingChanges(e state.Entry) (workspace.Counts, bool) {
	return workspace.PendingIn(engine.WorkspaceDir(e.Dir))
}

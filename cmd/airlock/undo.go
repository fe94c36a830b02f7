package main

import (
	"errors"
	"fmt"
	"io/fs"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// undoOptions is what airlock undo needs.
type undoOptions struct {
	IO *ioStreams
	ID string
	// Store is the undo store (under the state dir).
	Store func() (workspace.UndoStore, error)
}

func newUndoCmd(runF func(*undoOptions) error) *cobra.Command {
	o := &undoOptions{IO: systemIO(), Store: undoStore}
	c := &cobra.Command{
		Use:   "undo [ID|NAME]",
		Short: "Put a bind-mode workspace back as it was before a run",
		Long: `Put a bind-mode workspace back as it was before run ID: the files the run
changed, created or deleted get their old content, mode or absence back.
A file that changed again since the run is left as it is and listed, so
nothing made after the run is lost; the rest is restored. Without ID, list
the runs that can be undone (airlock ls -a shows them too).

A bind run keeps what it overwrites and deletes in a store under the state
dir, bounded by workspace.undo_size (default 1g; the least recently used
content goes first). The run warns when its changes alone exceed it.

  airlock run -- ./agent.sh        # edits, deletes in place
  airlock undo                     # RUN  ENDED  FILES  UNDO  WORKSPACE
  airlock undo 3f2a9c0d81b7        # restored 4 path(s)`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			o.IO.Out = c.OutOrStdout()
			if len(args) == 1 {
				o.ID = args[0]
			}
			if runF != nil {
				return runF(o)
			}
			return undoRun(o)
		},
	}
	return c
}

func undoStore() (workspace.UndoStore, error) {
	root, err := state.Root()
	if err != nil {
		return workspace.UndoStore{}, err
	}
	return workspace.UndoStore{Dir: engine.UndoDir(root), MaxBytes: workspace.DefaultUndoBytes}, nil
}

func undoRun(o *undoOptions) error {
	store, err := o.Store()
	if err != nil {
		return err
	}
	if o.ID == "" {
		return undoList(o, store)
	}
	// A name, or the ID of a sandbox still listed: its record's ID.
	var running bool
	if st, serr := openStore(); serr == nil {
		if e, rerr := st.Resolve(o.ID); rerr == nil {
			o.ID, running = e.Record.ID, e.Status.State == state.Running
		}
	}
	rec, err := store.LoadUndo(o.ID)
	if errors.Is(err, fs.ErrNotExist) && running {
		return fmt.Errorf("undo %s: the sandbox is still running: undo it once it has ended (airlock kill %s)", o.ID, o.ID)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("undo %s: no record of that run (only bind-mode runs that changed files leave one): airlock undo lists the runs that can be undone", o.ID)
	}
	if err != nil {
		return err
	}
	if rec.Undone != nil {
		return fmt.Errorf("undo %s: already undone at %s", o.ID, rec.Undone.Format("2006-01-02 15:04:05 UTC"))
	}
	res, err := store.Undo(rec)
	fmt.Fprintf(o.IO.Out, "restored %d path(s) in %s\n", len(res.Restored), rec.Root)
	for _, s := range res.Refused {
		fmt.Fprintf(o.IO.ErrOut, "airlock: undo: not restored: %s: %s\n", workspace.Quote(s.Path), s.Why)
	}
	if err != nil {
		return fmt.Errorf("undo %s: %w", o.ID, err)
	}
	if len(res.Refused) > 0 {
		return exitError{1}
	}
	return nil
}

func undoList(o *undoOptions, store workspace.UndoStore) error {
	runs, err := store.Runs()
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tENDED\tCHANGES\tUNDO\tWORKSPACE")
	for _, r := range runs {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.ID, ago(r.Ended), r.Changes, r.Undoable(), r.Root)
	}
	return w.Flush()
}

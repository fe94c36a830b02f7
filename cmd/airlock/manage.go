package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/llmusage"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// lsOptions is what airlock ls needs.
type lsOptions struct {
	IO      *ioStreams
	Running bool // only running sandboxes
	All     bool // also runs that ended and left only an undo record
	JSON    bool
	// Undo reads the undo store (airlock undo).
	Undo func() (workspace.UndoStore, error)
	// List reads every sandbox from the state dir.
	List func() ([]state.Entry, error)
}

func newLsCmd(runF func(*lsOptions) error) *cobra.Command {
	o := &lsOptions{IO: systemIO(), Undo: undoStore, List: func() ([]state.Entry, error) {
		store, err := openStore()
		if err != nil {
			return nil, err
		}
		return store.List()
	}}
	c := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list", "ps"},
		Short:   "List sandboxes",
		Args:    noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return lsRun(o)
		},
	}
	c.Flags().BoolVar(&o.Running, "running", false, "only running sandboxes")
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	c.Flags().BoolVarP(&o.All, "all", "a", false, "also list ended runs that can be undone (airlock undo ID)")
	return c
}

func lsRun(o *lsOptions) error {
	entries, err := o.List()
	if err != nil {
		return err
	}
	var shown []state.Entry
	for _, e := range entries {
		if !o.Running || e.Status.State == state.Running {
			shown = append(shown, e)
		}
	}
	// Which runs can be undone: the undo store's records, by ID.
	undo := map[string]string{}
	var ended []workspace.UndoSummary
	if o.Undo != nil {
		if store, err := o.Undo(); err == nil {
			runs, _ := store.Runs()
			listed := map[string]bool{}
			for _, e := range entries {
				listed[e.Record.ID] = true
			}
			for _, r := range runs {
				undo[r.ID] = r.Undoable()
				if o.All && !o.Running && !listed[r.ID] {
					ended = append(ended, r)
				}
			}
		}
	}
	pods := kubePods(shown)
	if o.JSON {
		l := listing(shown)
		for i := range l {
			l[i].Undo = undo[l[i].ID]
			if p, ok := pods[l[i].ID]; ok {
				l[i].Kube = &p
			}
		}
		return writeJSON(o.IO.Out, l)
	}
	// Buffered: the tabwriter writes every cell on its own.
	out := bufio.NewWriterSize(o.IO.Out, 64<<10)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	// Where kubernetes sandboxes are listed, their Pod and node too.
	podCols, noPod := func(id string) string { return "" }, ""
	head := "ID\tNAME\tSTATUS\tCREATED\tFROM\tCOMMAND\tBRANCH\tUNDO\tWORKSPACE"
	if pods != nil {
		head += "\tPOD\tNODE"
		noPod = "\t-\t-"
		podCols = func(id string) string {
			p := pods[id]
			return "\t" + dash(p.Pod) + "\t" + dash(p.Node)
		}
	}
	fmt.Fprintln(w, head)
	for _, e := range shown {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s%s\n", e.Record.ID, dash(e.Record.Name), statusText(e.Status),
			ago(e.Record.CreatedAt), origin(e.Record), dash(shorten(strings.Join(e.Record.Command, " "), 40)), dash(e.Record.Branch), dash(undo[e.Record.ID]), e.Record.Workspace, podCols(e.Record.ID))
	}
	for _, r := range ended {
		fmt.Fprintf(w, "%s\t-\tended\t%s\t-\t-\t-\t%s\t%s%s\n", r.ID, ago(r.Ended), undo[r.ID], r.Root, noPod)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Flush()
}

// origin says what made a sandbox, and its backend when not the default.
func origin(r state.Record) string {
	o := r.Origin
	if o == "" {
		o = "cli"
	}
	if r.Backend != "" && r.Backend != config.BackendNative {
		o += "/" + r.Backend
	}
	return o
}

// entryJSON is the stable JSON shape of a sandbox for ls and get.
type entryJSON struct {
	state.Record
	Status state.Status `json:"status"`
	Dir    string       `json:"state_dir"`
	// Undo is whether airlock undo can put the run's changes back (ls
	// only): yes, partly, no, undone; absent when it left no record.
	Undo string `json:"undo,omitempty"`
	// LLM is what the gateway counted of the sandbox's LLM API use (get
	// only; absent when there was none).
	LLM *llmusage.Totals `json:"llm,omitempty"`
	// Kube is a kubernetes sandbox's Pod and node (ls only, while the Pod
	// is there).
	Kube *engine.KubePod `json:"kubernetes,omitempty"`
}

// kubePods asks the cluster where the kubernetes sandboxes among es run;
// nil when there are none (or the cluster does not answer: ls still lists).
func kubePods(es []state.Entry) map[string]engine.KubePod {
	root := ""
	for _, e := range es {
		if e.Record.Backend == config.BackendKubernetes {
			root = filepath.Dir(filepath.Dir(e.Dir))
		}
	}
	if root == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pods, err := engine.KubernetesPods(ctx, root)
	if err != nil {
		return map[string]engine.KubePod{}
	}
	return pods
}

func listing(es []state.Entry) []entryJSON {
	out := make([]entryJSON, 0, len(es))
	for _, e := range es {
		out = append(out, entryJSON{Record: e.Record, Status: e.Status, Dir: e.Dir})
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func statusText(s state.Status) string {
	switch {
	case s.State == state.Exited && s.ExitCode != nil:
		return fmt.Sprintf("exited (%d)", *s.ExitCode)
	case s.State == "":
		return "unknown"
	}
	return string(s.State)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func ago(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02")
}

// getOptions is what airlock get needs.
type getOptions struct {
	IO  *ioStreams
	Ref string // the sandbox's ID or name
	// Resolve finds a sandbox by ID or name (in the state dir).
	Resolve func(string) (state.Entry, error)
}

func newGetCmd(runF func(*getOptions) error) *cobra.Command {
	o := &getOptions{IO: systemIO(), Resolve: resolve}
	return &cobra.Command{
		Use:   "get ID|NAME",
		Short: "Show one sandbox as JSON",
		Args:  oneArg("sandbox ID or name"),
		RunE: func(c *cobra.Command, args []string) error {
			o.Ref = args[0]
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return getRun(o)
		},
	}
}

func getRun(o *getOptions) error {
	e, err := o.Resolve(o.Ref)
	if err != nil {
		return err
	}
	out := listing([]state.Entry{e})[0]
	out.LLM = llmTotals(e)
	return writeJSON(o.IO.Out, out)
}

// llmTotals reads a sandbox's LLM totals from its audit log: every llm
// record carries the running totals, so the last one has them, whether the
// sandbox still runs or not (a file rotated away takes its records along,
// not the totals of later ones).
func llmTotals(e state.Entry) *llmusage.Totals {
	var last map[string]string
	for _, p := range audit.Files(filepath.Join(e.Dir, "audit.jsonl")) {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		audit.Read(f, func(r audit.Record) error {
			if r.Kind == audit.KindLLM && r.Extra["total_requests"] != "" {
				last = r.Extra
			}
			return nil
		}, func(int, error) {})
		f.Close()
	}
	if last == nil {
		return nil
	}
	t := llmusage.ParseTotals(last)
	return &t
}

// logsOptions is what airlock logs needs.
type logsOptions struct {
	IO     *ioStreams
	Ref    string // the sandbox's ID or name
	Follow bool
	// Resolve finds a sandbox by ID or name (in the state dir).
	Resolve func(string) (state.Entry, error)
}

func newLogsCmd(runF func(*logsOptions) error) *cobra.Command {
	o := &logsOptions{IO: systemIO(), Resolve: resolve}
	c := &cobra.Command{
		Use:   "logs [-f] ID|NAME",
		Short: "Print a detached sandbox's output",
		Args:  oneArg("sandbox ID or name"),
		RunE: func(c *cobra.Command, args []string) error {
			o.Ref = args[0]
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return logsRun(o)
		},
	}
	c.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep printing until the sandbox stops")
	return c
}

func logsRun(o *logsOptions) error {
	e, err := o.Resolve(o.Ref)
	if err != nil {
		return err
	}
	f, err := os.Open(e.LogPath())
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox %s has no logs: only detached sandboxes (run -d) keep them", o.Ref)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		if _, err := io.Copy(o.IO.Out, f); err != nil {
			return err
		}
		if !o.Follow {
			return nil
		}
		if cur, err := o.Resolve(e.Record.ID); err != nil || cur.Status.State != state.Running {
			_, err := io.Copy(o.IO.Out, f)
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killOptions is what airlock kill needs.
type killOptions struct {
	IO   *ioStreams
	Refs []string // sandboxes by ID or name
	All  bool     // every running sandbox instead
	// Pick resolves Refs, or with All every running sandbox.
	Pick func(refs []string, all bool) ([]state.Entry, error)
	Kill func(state.Entry) error
}

func newKillCmd(runF func(*killOptions) error) *cobra.Command {
	o := &killOptions{IO: systemIO(), Kill: kill, Pick: func(refs []string, all bool) ([]state.Entry, error) {
		return pick(refs, all, func(e state.Entry) bool { return e.Status.State == state.Running })
	}}
	c := &cobra.Command{
		Use:   "kill ID|NAME... | --all",
		Short: "Stop running sandboxes (every process in them dies)",
		Args: func(c *cobra.Command, args []string) error {
			if o.All != (len(args) == 0) {
				return usageError{"name sandboxes to kill, or pass --all"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.Refs = args
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return killRun(o)
		},
	}
	c.Flags().BoolVarP(&o.All, "all", "a", false, "kill every running sandbox")
	return c
}

func killRun(o *killOptions) error {
	targets, err := o.Pick(o.Refs, o.All)
	if err != nil {
		return err
	}
	return forEach(o.IO.Out, targets, o.Kill)
}

func kill(e state.Entry) error {
	if e.Status.State != state.Running {
		return fmt.Errorf("not running (%s)", statusText(e.Status))
	}
	cl, err := control.Dial(e.SocketPath())
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.Kill(); err != nil {
		return err
	}
	// The supervisor releases the sandbox's lock once everything is torn down.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cur, err := resolve(e.Record.ID); err != nil || cur.Status.State != state.Running {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("still running 10s after the kill request")
}

// forEach applies do to each sandbox, printing the ID of each it did, and
// reports all failures together: one bad sandbox does not stop the rest.
func forEach(w io.Writer, targets []state.Entry, do func(state.Entry) error) error {
	var failed []string
	for _, e := range targets {
		if err := do(e); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", e.Record.ID, err))
			continue
		}
		fmt.Fprintln(w, e.Record.ID)
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// pick resolves refs, or with all, every entry that match accepts.
func pick(refs []string, all bool, match func(state.Entry) bool) ([]state.Entry, error) {
	store, err := openStore()
	if err != nil {
		return nil, err
	}
	if all {
		entries, err := store.List()
		if err != nil {
			return nil, err
		}
		var out []state.Entry
		for _, e := range entries {
			if match(e) {
				out = append(out, e)
			}
		}
		return out, nil
	}
	var out []state.Entry
	for _, r := range refs {
		e, err := store.Resolve(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", r, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// rmOptions is what airlock rm needs.
type rmOptions struct {
	IO      *ioStreams
	Refs    []string // sandboxes by ID or name
	Stopped bool     // every stopped sandbox instead
	Force   bool     // kill running ones first, drop changes nobody applied
	// Pick resolves Refs, or with Stopped every sandbox not running.
	Pick    func(refs []string, stopped bool) ([]state.Entry, error)
	Kill    func(state.Entry) error
	Pending func(state.Entry) (workspace.Counts, bool) // workspace changes nobody applied or discarded
	Remove  func(state.Entry) error
}

func newRmCmd(runF func(*rmOptions) error) *cobra.Command {
	o := &rmOptions{IO: systemIO(), Kill: kill, Pending: pendingChanges, Remove: remove,
		Pick: func(refs []string, stopped bool) ([]state.Entry, error) {
			return pick(refs, stopped, func(e state.Entry) bool { return e.Status.State != state.Running })
		}}
	c := &cobra.Command{
		Use:     "rm ID|NAME... | --stopped",
		Aliases: []string{"remove"},
		Short:   "Remove stopped sandboxes from the state dir",
		Long: `Remove stopped sandboxes from the state dir. A sandbox whose overlay or
copy workspace still holds changes nobody applied or discarded is kept, with
a message: review them (airlock diff, apply, discard) or pass -f to drop them.
A --branch sandbox's worktree goes with it (its branch and commits stay),
unless it holds uncommitted changes: commit them on the branch, or -f.`,
		Args: func(c *cobra.Command, args []string) error {
			if o.Stopped != (len(args) == 0) {
				return usageError{"name sandboxes to remove, or pass --stopped"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.Refs = args
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return rmRun(o)
		},
	}
	c.Flags().BoolVar(&o.Stopped, "stopped", false, "remove every sandbox that is not running")
	c.Flags().BoolVarP(&o.Force, "force", "f", false, "kill running sandboxes first, and drop workspace changes nobody applied")
	return c
}

// removeWorktree removes a --branch sandbox's worktree (its branch and
// commits stay), refusing while it holds uncommitted changes unless force.
// Only a worktree in the state dir's worktrees is airlock's to remove.
func removeWorktree(e state.Entry, force bool) error {
	if e.Record.Branch == "" {
		return nil
	}
	root, err := state.Root()
	if err != nil {
		return err
	}
	if dir := filepath.Join(root, worktreesDir); filepath.Dir(e.Record.Workspace) != dir {
		return nil
	}
	return workspace.RemoveBranchWorktree(e.Record.Workspace, force)
}

func rmRun(o *rmOptions) error {
	targets, err := o.Pick(o.Refs, o.Stopped)
	if err != nil {
		return err
	}
	return forEach(o.IO.Out, targets, func(e state.Entry) error {
		if e.Status.State == state.Running {
			if !o.Force {
				return fmt.Errorf("running: stop it with airlock kill %s, or use rm -f", e.Record.ID)
			}
			if err := o.Kill(e); err != nil {
				return err
			}
		}
		if n, ok := o.Pending(e); ok && !o.Force {
			return fmt.Errorf("its workspace changes (%s) were neither applied nor discarded: airlock diff %s, then airlock apply or discard %s; or rm -f to drop them", n, e.Record.ID, e.Record.ID)
		}
		if err := removeWorktree(e, o.Force); err != nil {
			return err
		}
		return o.Remove(e)
	})
}

// remove deletes a stopped sandbox and whatever a crashed supervisor left,
// through the engine's teardown for a sandbox whose host is gone.
func remove(e state.Entry) error {
	store, err := openStore()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return engine.Remove(ctx, store, e)
}

// pruneContainers removes the docker backend's containers of this state dir
// whose sandboxes live does not claim, and counts them.
func pruneContainers(store *state.Store, live func(id string) bool) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	removed, err := engine.Prune(ctx, store.Root(), live, true)
	return len(removed), err
}

// liveIn reports which sandboxes of store are running or starting.
func liveIn(store *state.Store) func(id string) bool {
	return func(id string) bool {
		e, err := store.Resolve(id)
		return err == nil && e.Record.ID == id && (e.Status.State == state.Running || e.Status.State == state.Creating)
	}
}

// pruneOptions is what airlock prune needs.
type pruneOptions struct {
	IO *ioStreams
	// Stopped lists every sandbox not running.
	Stopped func() ([]state.Entry, error)
	Pending func(state.Entry) (workspace.Counts, bool) // workspace changes nobody applied or discarded
	Remove  func(state.Entry) error
	// Sweep removes what no record names: stale cgroups, leftover
	// containers (usesDocker: an error there is worth telling), an older
	// airlock's cache; it reports on errOut.
	Sweep func(out, errOut io.Writer, usesDocker bool) error
}

func newPruneCmd(runF func(*pruneOptions) error) *cobra.Command {
	o := &pruneOptions{IO: systemIO(), Pending: pendingChanges, Remove: remove, Sweep: sweep,
		Stopped: func() ([]state.Entry, error) {
			return pick(nil, true, func(e state.Entry) bool { return e.Status.State != state.Running })
		}}
	return &cobra.Command{
		Use:   "prune",
		Short: "Remove every stopped or crashed sandbox and what it left behind",
		Long: `Remove every stopped or crashed sandbox and what it left behind, except
those whose overlay or copy workspace holds changes nobody applied or
discarded, and --branch sandboxes whose worktree holds uncommitted changes:
those are named, and kept.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.IO.Out, o.IO.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			if runF != nil {
				return runF(o)
			}
			return pruneRun(o)
		},
	}
}

func pruneRun(o *pruneOptions) error {
	targets, err := o.Stopped()
	if err != nil {
		return err
	}
	n, usesDocker := 0, false
	for _, e := range targets {
		usesDocker = usesDocker || e.Record.Backend == config.BackendDocker || e.Record.Backend == config.BackendKubernetes
		if k, ok := o.Pending(e); ok {
			fmt.Fprintf(o.IO.ErrOut, "airlock: kept %s: its workspace changes (%s) wait for airlock apply or discard\n", e.Record.ID, k)
			continue
		}
		if err := removeWorktree(e, false); err != nil {
			fmt.Fprintf(o.IO.ErrOut, "airlock: kept %s: %v\n", e.Record.ID, err)
			continue
		}
		if err := o.Remove(e); err != nil {
			fmt.Fprintf(o.IO.ErrOut, "airlock: %s: %v\n", e.Record.ID, err)
			continue
		}
		n++
	}
	fmt.Fprintf(o.IO.Out, "removed %d sandbox(es)\n", n)
	return o.Sweep(o.IO.Out, o.IO.ErrOut, usesDocker)
}

// sweep removes what no record names.
func sweep(out, errOut io.Writer, usesDocker bool) error {
	// Cgroups no record names: a supervisor killed before it
	// registered the sandbox left its group behind.
	sweepStaleCgroups()
	// Containers whose records are gone (a crash between the two),
	// when there is an engine to ask.
	store, err := openStore()
	if err != nil {
		return err
	}
	if k, err := pruneContainers(store, liveIn(store)); err != nil && usesDocker {
		fmt.Fprintf(errOut, "airlock: %v\n", err)
	} else if k > 0 {
		fmt.Fprintf(out, "removed %d leftover container(s)\n", k)
	}
	// The full binary an older airlock (the lean front) cached
	// there, ~23 MB per build: nothing runs it any more.
	if err := os.RemoveAll(filepath.Join(store.Root(), "full")); err != nil {
		fmt.Fprintf(errOut, "airlock: %v\n", err)
	}
	return nil
}

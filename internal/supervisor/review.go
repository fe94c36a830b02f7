package supervisor

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/term"

	"github.com/airlock-dev/airlock/internal/workspace"
)

// ProgressBar draws copy-in progress on a terminal, once a copy has taken
// long enough (a second) for it to matter, and clears it at the end.
func ProgressBar(w io.Writer) workspace.Progress {
	start := time.Now()
	shown := false
	return func(phase string, done, total, bytes int64) {
		if time.Since(start) < time.Second && !shown {
			return
		}
		shown = true
		line := fmt.Sprintf("airlock: %s workspace: %d files, %.1f MiB", phase, done, float64(bytes)/(1<<20))
		if total > 0 {
			const width = 30
			fill := int(float64(width) * float64(done) / float64(total))
			line = fmt.Sprintf("airlock: %s workspace [%s%s] %d/%d files, %.1f MiB", phase,
				strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, total, float64(bytes)/(1<<20))
		}
		fmt.Fprintf(w, "\r\033[K%s", line)
		if total > 0 && done == total {
			fmt.Fprint(w, "\r\033[K")
		}
	}
}

// reviewWorkspace runs once the sandbox has stopped. Bind mode: protected
// git files are restored and risky changes (already on disk) reported.
// Overlay and copy: changes are applied (--auto-apply, or a yes at the
// prompt) or kept for airlock diff/apply/discard. It reports whether
// anything is kept for review, so the sandbox's state must stay. removed
// says the sandbox's directory goes right after unless something is kept:
// a bind session then writes nothing there.
func (sv *supervisor) reviewWorkspace(ws *workspace.Session, id string, removed bool) (keep bool) {
	defer func() { sv.recordReview(ws, keep) }()
	out := sv.io.Stderr
	const prefix = "airlock: "
	finish := ws.Finish
	if removed {
		finish = ws.FinishUnsaved
	}
	rep, err := finish()
	if err != nil {
		fmt.Fprintf(out, "%sworkspace review failed: %v; the sandbox's changes are kept: airlock diff %s\n", prefix, err, id)
		return ws.Mode() != workspace.Bind
	}
	for _, c := range rep.Restored {
		why := strings.Join(c.Risks, "; ")
		if why == "" {
			why = string(c.Kind)
		}
		fmt.Fprintf(out, "%s--protect-git restored %s (%s during the run: %s)\n", prefix, workspace.Quote(c.Path), c.Kind, why)
	}
	for _, d := range rep.Defused {
		fmt.Fprintf(out, "%s--protect-git defused %s (%s): %s\n", prefix, workspace.Quote(d.Path), d.Why, d.Action)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(out, "%swarning: %s\n", prefix, n)
	}
	cs := rep.Changes
	if ws.Mode() == workspace.Bind {
		const shown = 10 // a flood would hide the first, most telling lines
		risky := 0
		for _, c := range cs {
			if !c.Risky() {
				continue
			}
			if risky++; risky <= shown {
				fmt.Fprintf(out, "%swarning: risky change already in the workspace: %s %s: %s\n", prefix, c.Kind, workspace.Quote(c.Path), strings.Join(c.Risks, "; "))
			}
		}
		if risky > shown {
			fmt.Fprintf(out, "%swarning: and %d more risky changes in the workspace (see them with --workspace-mode overlay and airlock diff)\n", prefix, risky-shown)
		}
		return false
	}
	n := workspace.Count(cs)
	if n.Applicable() == 0 {
		workspace.WriteFindings(out, prefix, cs)
		return false
	}
	spec := sv.spec.Config.Workspace
	interactive := !sv.spec.Detached && term.IsTerminal(sv.io.Stdin) && term.IsTerminal(out)
	switch {
	case spec.AutoApply:
		workspace.WriteFindings(out, prefix, cs)
		plain, risky := workspace.SplitRisky(cs)
		todo := plain
		if spec.ApplyRisky {
			todo = append(todo, risky...)
		}
		res, err := ws.Apply(todo)
		workspace.WriteResult(out, prefix, ws.Root(), res)
		if err != nil {
			fmt.Fprintf(out, "%sapply: %v\n", prefix, err)
		}
		if len(risky) > 0 && !spec.ApplyRisky {
			fmt.Fprintf(out, "%sheld back %d risky change(s): review with airlock diff %s, then airlock apply %s PATH... or airlock discard %s\n", prefix, len(risky), id, id, id)
		}
	case interactive:
		res, ok, err := ws.Interactive(sv.io.Stdin, out, sv.io.Stdout, prefix, cs)
		if ok {
			workspace.WriteResult(out, prefix, ws.Root(), res)
		}
		if err != nil {
			fmt.Fprintf(out, "%sapply: %v\n", prefix, err)
		}
	}
	left, err := ws.Changes()
	if err != nil {
		return true
	}
	if m := workspace.Count(left); m.Applicable() > 0 {
		fmt.Fprintf(out, "%skept %s for review: airlock diff %s; airlock apply %s; airlock discard %s\n", prefix, m, id, id, id)
		return true
	}
	return false
}

// recordReview puts the review's outcome in the audit stream.
func (sv *supervisor) recordReview(ws *workspace.Session, keep bool) {
	left, err := ws.Changes()
	if err != nil {
		return
	}
	outcome := "clean"
	switch {
	case keep:
		outcome = "kept"
	case ws.Mode() == workspace.Bind && len(left) > 0:
		outcome = "in place"
	case len(left) == 0 && ws.Mode() != workspace.Bind:
		outcome = "applied or none"
	}
	if sv.record != nil {
		sv.record(outcome, workspace.Count(left))
	}
}

package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// WorkspaceSpec is how the workspace is shown inside and reviewed after.
type WorkspaceSpec struct {
	Mode       workspace.Mode `json:"mode,omitempty"` // "" is bind
	Exclude    []string       `json:"exclude,omitempty"`
	ProtectGit bool           `json:"protect_git,omitempty"`
	AutoApply  bool           `json:"auto_apply,omitempty"`
	ApplyRisky bool           `json:"apply_risky,omitempty"`
	// StateRoot holds the hash cache shared by runs on the same workspace.
	StateRoot string `json:"state_root,omitempty"`
}

// WorkspaceDir is where a sandbox's workspace session lives in its state dir.
func WorkspaceDir(sandboxDir string) string { return filepath.Join(sandboxDir, "workspace") }

// prepareWorkspace takes the manifest (and the copy, or the overlay's
// layers) before the sandbox starts and shapes spec.Native to match.
func prepareWorkspace(dir string, spec *Spec, stderr *os.File) (*workspace.Session, error) {
	w := spec.Workspace
	mode := w.Mode
	if mode == "" {
		mode = workspace.Bind
	}
	if mode == workspace.Overlay && spec.backend() == BackendDocker {
		// overlayfs is mounted inside the native sandbox's own namespaces; a
		// container gets the same review through a staged copy instead.
		mode = workspace.Copy
		if !spec.Quiet && stderr != nil {
			fmt.Fprintln(stderr, "airlock: --workspace-mode overlay: the docker backend stages a copy of the workspace instead; the host is untouched until you apply, as with overlay")
		}
	}
	cfg := workspace.Config{
		Mode: mode, Root: spec.Native.Workspace, Exclude: w.Exclude, ProtectGit: w.ProtectGit && mode == workspace.Bind,
	}
	// What the sandbox never sees is neither hashed, copied nor applied.
	for _, p := range append(native.Hidden(spec.Native, os.Getenv), spec.Native.Hide...) {
		if p != cfg.Root && strings.HasPrefix(p, cfg.Root+"/") {
			cfg.Skip = append(cfg.Skip, p)
		}
	}
	if w.StateRoot != "" {
		h := sha256.Sum256([]byte(cfg.Root))
		cfg.CacheFile = filepath.Join(w.StateRoot, "cache", "hashes-"+hex.EncodeToString(h[:8]))
		if mode != workspace.Bind && strings.HasPrefix(w.StateRoot+"/", cfg.Root+"/") {
			return nil, fmt.Errorf("the state dir %s lies inside the workspace, which %s mode cannot layer over: set AIRLOCK_STATE_DIR to a directory outside it", w.StateRoot, mode)
		}
	}
	var progress workspace.Progress
	if mode == workspace.Copy && !spec.Quiet && stderr != nil && term.IsTerminal(int(stderr.Fd())) {
		progress = progressBar(stderr)
	}
	s, err := workspace.Prepare(WorkspaceDir(dir), cfg, progress)
	if err != nil {
		return nil, err
	}
	switch mode {
	case workspace.Overlay:
		spec.Native.Overlay = &native.Overlay{Upper: s.UpperDir(), Work: s.WorkDir()}
	case workspace.Copy:
		spec.Native.WorkspaceSource = s.CopyDir()
	case workspace.Bind:
		spec.Native.RO = append(spec.Native.RO, s.ReadOnlyPaths()...)
	}
	return s, nil
}

// progressBar draws copy-in progress on a terminal, once a copy has taken
// long enough (a second) for it to matter, and clears it at the end.
func progressBar(w io.Writer) workspace.Progress {
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
// anything is kept for review, so the sandbox's state must stay.
func (sv *supervisor) reviewWorkspace(ws *workspace.Session, id string) (keep bool) {
	out := sv.io.Stderr
	const prefix = "airlock: "
	rep, err := ws.Finish()
	if err != nil {
		fmt.Fprintf(out, "%sworkspace review failed: %v; the sandbox's changes are kept: airlock diff %s\n", prefix, err, id)
		return ws.Mode() != workspace.Bind
	}
	for _, c := range rep.Restored {
		why := strings.Join(c.Risks, "; ")
		if why == "" {
			why = string(c.Kind)
		}
		fmt.Fprintf(out, "%s--protect-git restored %s (%s by the sandbox: %s)\n", prefix, workspace.Quote(c.Path), c.Kind, why)
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
	spec := sv.spec.Workspace
	interactive := !sv.spec.Detached && term.IsTerminal(int(sv.io.Stdin.Fd())) && term.IsTerminal(int(out.Fd()))
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

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// runFlagKeys are the run flags that are config keys: set on the command
// line, they are the last layer over the config files. The config schema
// names them (config.RunFlags); addRunFlags defines them.
var runFlagKeys = func() []struct{ flag, key string } {
	var out []struct{ flag, key string }
	for _, f := range config.RunFlags() {
		out = append(out, struct{ flag, key string }{f.Flag, f.Key})
	}
	return out
}()

// flagLayer is the config layer of the flags the user set: a flag left at
// its default does not override a config file.
func flagLayer(fs *pflag.FlagSet) (*config.Layer, error) {
	l := config.NewLayer(config.SourceFlag, "")
	for _, fk := range runFlagKeys {
		f := fs.Lookup(fk.flag)
		if f == nil || !f.Changed {
			continue
		}
		values := []string{f.Value.String()}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			values = sv.GetSlice()
		}
		if err := l.SetFlag(fk.key, "--"+fk.flag, values); err != nil {
			return nil, usageError{err.Error()}
		}
	}
	// --ask is approvals.mode ask (a flag cannot set the mode back to deny:
	// leave it out).
	if f := fs.Lookup("ask"); f != nil && f.Changed && f.Value.String() == "true" {
		if err := l.SetFlag("approvals.mode", "--ask", []string{config.ApprovalsAsk}); err != nil {
			return nil, usageError{err.Error()}
		}
	}
	// --no-hide drops the built-in hide patterns (the user's stay).
	if f := fs.Lookup("no-hide"); f != nil && f.Changed && f.Value.String() == "true" {
		if err := l.SetFlag("filesystem.hide_defaults", "--no-hide", []string{"false"}); err != nil {
			return nil, usageError{err.Error()}
		}
	}
	return l, nil
}

// runConfig is a sandbox-making command's config: the files for its
// workspace, then the run flags the user set.
func runConfig(c *cobra.Command, o *runOptions) (*config.Loaded, error) {
	flags, err := flagLayer(c.Flags())
	if err != nil {
		return nil, err
	}
	if o.branch == "" {
		return loadConfig(o.workspace, flags, o.quiet, o.noConfig)
	}
	ws, err := branchWorkspace(o)
	if err != nil {
		return nil, err
	}
	l, err := loadConfig(ws, flags, o.quiet, o.noConfig)
	if err == nil {
		w := l.Spec.Workspace
		switch {
		case w.Mode != "" && w.Mode != config.WorkspaceBind:
			err = fmt.Errorf("--branch %s: the worktree is the sandbox's own, shown in bind mode: leave --workspace-mode %s out", o.branch, w.Mode)
		case !w.ProtectGit:
			err = fmt.Errorf("--branch %s: commits in a worktree need --protect-git's guard (what a commit writes writable, the rest of the repository not): leave --protect-git=false out", o.branch)
		}
	}
	if err != nil {
		o.dropOnError(&err)
		return nil, err
	}
	return l, nil
}

// branchWorkspace makes --branch's worktree of the repository holding the
// workspace (--workspace, else the current directory) under the state dir
// and returns it: the run's workspace. The run's record is kept, for ls
// to show the branch and rm to remove the worktree.
func branchWorkspace(o *runOptions) (string, error) {
	dir, err := resolveWorkspace(o.workspace)
	if err != nil {
		return "", err
	}
	root, err := state.Root()
	if err != nil {
		return "", err
	}
	wt, err := workspace.AddBranchWorktree(dir, filepath.Join(root, worktreesDir), o.branch)
	if err != nil {
		return "", err
	}
	if _, _, err := workspace.WorktreeGuard(wt.Path); err != nil {
		wt.Drop()
		return "", fmt.Errorf("--branch %s: %v", o.branch, err)
	}
	o.dropBranch, o.keep = wt.Drop, true
	return wt.Path, nil
}

// worktreesDir holds --branch's worktrees in the state dir.
const worktreesDir = "worktrees"

// dropOnError removes a --branch worktree made for a run that failed
// before it started.
func (o *runOptions) dropOnError(err *error) {
	if *err != nil && o.dropBranch != nil {
		var ee exitError
		if !errors.As(*err, &ee) {
			o.dropBranch()
			o.dropBranch = nil
		}
	}
}

// loadConfig resolves the workspace (wsFlag, else the current directory) and
// reads every config source for it, flags last; warnings go to stderr
// unless quiet.
func loadConfig(wsFlag string, flags *config.Layer, quiet, noFiles bool) (*config.Loaded, error) {
	ws, err := resolveWorkspace(wsFlag)
	if err != nil {
		return nil, err
	}
	l, err := config.Load(config.Options{Workspace: ws, Flags: flags, NoFiles: noFiles})
	if err != nil {
		return nil, err
	}
	if !quiet {
		for _, w := range l.Warnings {
			fmt.Fprintf(os.Stderr, "airlock: warning: %s\n", w)
		}
	}
	return l, nil
}

// resolveWorkspace is the workspace's absolute path, symlinks resolved.
func resolveWorkspace(ws string) (string, error) {
	if ws == "" {
		var err error
		if ws, err = os.Getwd(); err != nil {
			return "", fmt.Errorf("cannot tell the current directory (%v): pass --workspace DIR", err)
		}
	}
	ws, err := existingDir(ws, "workspace", "create it or pass --workspace DIR")
	if err != nil {
		return "", err
	}
	if ws == "/" {
		return "", usageError{"the workspace cannot be / (the whole machine): cd into a project or pass --workspace DIR"}
	}
	return ws, nil
}

// originLabel names where key's value came from, for errors: the flag
// itself, or the key and its file and line.
func originLabel(l *config.Loaded, key string, i int) string {
	os := l.Origins[key]
	if i >= len(os) {
		i = len(os) - 1
	}
	if i < 0 {
		return key
	}
	if o := os[i]; o.Flag != "" {
		return o.Flag
	} else if o.File != "" {
		return key + " (" + o.String() + ")"
	}
	return key
}

var errNoConfigDir = errors.New("no config directory: set HOME or XDG_CONFIG_HOME")

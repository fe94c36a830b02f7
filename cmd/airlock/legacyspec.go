package main

// This file is transitional: it turns the neutral config.Spec into today's
// supervisor.Spec. It goes when the engine consumes config.Spec directly.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/supervisor"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// legacyLimits is the config's limits, defaults filled in, as the native
// backend takes them.
func legacyLimits(l *config.Loaded) native.Limits {
	lim := l.Spec.Limits
	mem := lim.MemoryBytes
	if mem == 0 {
		mem = native.TotalMemory() / 2
	}
	return native.Limits{MemoryBytes: mem, CPUs: lim.CPUs, Pids: lim.Pids}
}

// legacySpec checks the merged config with the run's own options (command,
// terminal, detach, name) and builds the supervisor's spec; stateRoot (with
// the control sockets of every sandbox) is hidden inside.
func legacySpec(l *config.Loaded, o *runOptions, args []string, limits native.Limits, stateRoot string) (supervisor.Spec, error) {
	var s supervisor.Spec
	c := l.Spec
	tmp := c.Limits.TmpBytes
	if tmp == 0 {
		tmp = limits.MemoryBytes
	}
	if o.name != "" && !state.ValidName(o.name) {
		return s, usageError{fmt.Sprintf("--name %q: use letters, digits, '_', '.' and '-' (up to 63, starting with a letter or digit)", o.name)}
	}
	if o.detach && o.tty {
		return s, usageError{"-t and -d do not mix: start with -d, then airlock exec -t ID -- CMD"}
	}
	hostHome, _ := os.UserHomeDir()
	s.Native = native.Config{
		Workspace: c.Workspace.Path, HostHome: hostHome, NoDelete: c.Workspace.NoDelete, TmpBytes: tmp,
		Limits: limits,
	}
	if c.Home != "" {
		what := originLabel(l, "home", 0)
		if err := os.MkdirAll(c.Home, 0o700); err != nil {
			return s, fmt.Errorf("%s %s: %v", what, c.Home, err)
		}
		var err error
		if s.Native.Home, err = existingDir(c.Home, what, ""); err != nil {
			return s, err
		}
	}
	for i, p := range c.RO {
		abs, err := existingPath(p, originLabel(l, "mounts.ro", i))
		if err != nil {
			return s, err
		}
		s.Native.RO = append(s.Native.RO, abs)
	}
	for i, p := range c.RW {
		abs, err := existingPath(p, originLabel(l, "mounts.rw", i))
		if err != nil {
			return s, err
		}
		s.Native.RW = append(s.Native.RW, abs)
	}
	s.Native.Hide = append(s.Native.Hide, stateRoot)
	if cfg, err := os.UserConfigDir(); err == nil {
		s.Native.Hide = append(s.Native.Hide, filepath.Join(cfg, "airlock"))
	}
	if l.Dir != "" && !slices.Contains(s.Native.Hide, l.Dir) {
		s.Native.Hide = append(s.Native.Hide, l.Dir)
	}
	s.Command, s.TTY, s.Timeout, s.Detached, s.Quiet = args, o.tty, c.Limits.Timeout, o.detach, o.quiet
	n := c.Network
	s.Network = supervisor.NetworkSpec{
		AllowHosts: n.AllowHosts, DenyHosts: n.DenyHosts, Endpoints: n.Endpoints, Secrets: n.Secrets,
		AddHosts: n.AddHosts, DNSUpstream: n.DNSUpstream, Mode: n.Mode,
	}
	mode, err := workspace.ParseMode(c.Workspace.Mode)
	if err != nil {
		return s, usageError{err.Error()}
	}
	w := c.Workspace
	if mode == workspace.Bind && w.AutoApply {
		return s, usageError{originLabel(l, "workspace.auto_apply", 0) + " needs --workspace-mode overlay or copy: in bind mode changes land in the workspace as they happen"}
	}
	if w.ApplyRisky && !w.AutoApply {
		return s, usageError{originLabel(l, "workspace.apply_risky", 0) + " goes with --auto-apply"}
	}
	if _, err := workspace.NewExcluder(w.Exclude); err != nil {
		return s, usageError{err.Error()}
	}
	s.Workspace = supervisor.WorkspaceSpec{
		Mode: mode, Exclude: w.Exclude, ProtectGit: w.ProtectGit, AutoApply: w.AutoApply, ApplyRisky: w.ApplyRisky,
		StateRoot: stateRoot,
	}
	s.Backend, s.Image = c.BackendName(), c.Image
	if s.Image != "" && s.Backend != supervisor.BackendDocker {
		return s, usageError{originLabel(l, "image", 0) + " needs --backend docker"}
	}
	if n.UpstreamCA != "" {
		if s.Network.UpstreamCA, err = existingPath(n.UpstreamCA, originLabel(l, "network.upstream_ca", 0)); err != nil {
			return s, err
		}
	}
	return s, nil
}

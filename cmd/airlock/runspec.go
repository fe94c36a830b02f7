package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/term"
)

// runSpec checks the merged config with the run's own options (command,
// terminal, detach, name, scratch dirs) and makes the engine's spec: paths
// resolved, defaults filled in. Errors about a value from a file name the
// file and line.
func runSpec(l *config.Loaded, o *runOptions, args []string) (engine.Spec, error) {
	s := engine.Spec{Origin: engine.OriginCLI, Config: l.Spec, HostIDs: o.noIDMap, Workdir: o.workdir}
	s.Branch = o.branch
	c := &s.Config
	if o.workdir != "" && !filepath.IsAbs(o.workdir) {
		return s, usageError{fmt.Sprintf("--workdir %q: give an absolute path inside the sandbox", o.workdir)}
	}
	if o.name != "" && !state.ValidName(o.name) {
		return s, usageError{fmt.Sprintf("--name %q: use letters, digits, '_', '.' and '-' (up to 63, starting with a letter or digit)", o.name)}
	}
	if o.detach && o.tty && len(args) == 0 {
		return s, usageError{"-t -d needs a command to give the terminal to: airlock run -t -d -- CMD, then airlock attach ID"}
	}
	// The settings that hang together, and the defaults every host gets.
	if err := s.Validate(func(key string) string { return originLabel(l, key, 0) }); err != nil {
		return s, usageError{err.Error()}
	}
	s.Complete()
	if c.Home != "" {
		what := originLabel(l, "home", 0)
		if err := os.MkdirAll(c.Home, 0o700); err != nil {
			return s, fmt.Errorf("%s %s: %v", what, c.Home, err)
		}
		var err error
		if c.Home, err = existingDir(c.Home, what, ""); err != nil {
			return s, err
		}
	}
	c.RO, c.RW = nil, nil
	for i, p := range l.Spec.RO {
		abs, err := existingPath(p, originLabel(l, "mounts.ro", i))
		if err != nil {
			return s, err
		}
		c.RO = append(c.RO, abs)
	}
	for i, p := range l.Spec.RW {
		abs, err := existingPath(p, originLabel(l, "mounts.rw", i))
		if err != nil {
			return s, err
		}
		c.RW = append(c.RW, abs)
	}
	if c.Network.UpstreamCA != "" {
		var err error
		if c.Network.UpstreamCA, err = existingPath(c.Network.UpstreamCA, originLabel(l, "network.upstream_ca", 0)); err != nil {
			return s, err
		}
	}
	if c.Network.PolicyScript != "" {
		var err error
		if c.Network.PolicyScript, err = existingPath(c.Network.PolicyScript, originLabel(l, "network.policy_script", 0)); err != nil {
			return s, err
		}
	}
	for _, p := range o.scratch {
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			return s, usageError{fmt.Sprintf("--scratch %q: use an absolute path inside the sandbox other than /", p)}
		}
		s.Scratch = append(s.Scratch, filepath.Clean(p))
	}
	// The config dir is hidden inside whatever XDG says it is.
	if l.Dir != "" {
		s.Hide = append(s.Hide, l.Dir)
	}
	s.Command, s.TTY, s.Detached, s.Quiet, s.Watch, s.Keep = args, o.tty, o.detach, o.quiet, o.watch, o.keep
	// Someone must be able to answer: this terminal, airlock approvals and
	// airlock ui (a detached sandbox's owner), or a prepared decisions file.
	if a := c.Approvals; a.Ask() && !o.detach && a.Decisions == "" && !term.IsTerminal(os.Stderr) {
		return s, usageError{originLabel(l, "approvals.mode", 0) + ": nobody can answer here (no terminal): run with -d and answer with airlock approvals or airlock ui, or prepare the answers with --decisions FILE"}
	}
	if c.Approvals.Decisions != "" {
		var err error
		if c.Approvals.Decisions, err = existingPath(c.Approvals.Decisions, originLabel(l, "approvals.decisions", 0)); err != nil {
			return s, err
		}
	}
	return s, nil
}

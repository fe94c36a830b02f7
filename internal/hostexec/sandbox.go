package hostexec

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/childspec"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// backstop is how much longer than Config.Timeout a command's sandbox
// gives itself before it stops on its own (airlock run --timeout), should
// the handler's own kill not reach it.
const backstop = 10 * time.Second

// checkGrants refuses a rule whose grants cannot be given: a secret whose
// source fails, a path that does not exist or that holds (or lies within)
// one of airlock's own directories, an SSH agent. Errors name the rule and
// the secret by name, never a value.
func checkGrants(r Rule, protected []string) error {
	name := fmt.Sprintf("hostexec: rule %q", r.Match)
	if r.SSHAgent {
		return fmt.Errorf("%s: ssh_agent: this airlock cannot show the SSH agent to a command's sandbox yet (sockets stay hidden): use an HTTPS remote with a secret, or leave ssh_agent out", name)
	}
	for _, sp := range r.Secrets {
		if _, err := sp.Open(secrets.DefaultSources()); err != nil {
			return fmt.Errorf("%s: secret %s: %w", name, sp.Name, err)
		}
	}
	var own []string
	for _, p := range protected {
		if p == "" {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		own = append(own, filepath.Clean(p))
	}
	for _, list := range []struct {
		key   string
		paths []string
	}{{"ro", r.RO}, {"rw", r.RW}} {
		for _, p := range list.paths {
			if !filepath.IsAbs(p) {
				return fmt.Errorf("%s: %s %s: not an absolute path", name, list.key, p)
			}
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", name, list.key, p, errors.Unwrap(err))
			}
			for _, o := range own {
				if within(real, o) || within(o, real) {
					return fmt.Errorf("%s: %s %s: it would show airlock's own config or state (%s) to the command: name a path outside it", name, list.key, p, o)
				}
			}
		}
	}
	return nil
}

// within reports whether p is dir or lies beneath it.
func within(p, dir string) bool {
	r, err := filepath.Rel(dir, p)
	return err == nil && (r == "." || filepath.IsLocal(r))
}

// ChildSpec is the spec of the sandbox, called name, that runs argv in
// workspace, in dir, with what g grants and nothing else (internal/childspec
// hands it to airlock run): the workspace bound with .git protected, a
// timeout a little past the handler's own, and g's hosts, secrets and
// paths. It starts from the defaults, never the user's config files (they
// would widen the command's sandbox past its rule, and start its MCP
// servers and host commands inside, recursively); no host variable reaches
// the command. The name lets the handler remove what a killed one leaves
// (airlock rm -f NAME); while it runs, airlock ls and airlock audit show it.
func ChildSpec(name, workspace, dir string, timeout time.Duration, g *Rule, argv []string) childspec.Spec {
	s := childspec.New(argv...)
	s.Name, s.Workdir = name, dir
	c := &s.Config
	c.Workspace.Path, c.Workspace.Mode, c.Workspace.ProtectGit = workspace, config.WorkspaceBind, true
	c.Limits.Timeout = timeout + backstop
	if g != nil {
		c.Network.AllowHosts = slices.Clone(g.AllowHosts)
		c.Network.Secrets = slices.Clone(g.Secrets)
		c.RO, c.RW = slices.Clone(g.RO), slices.Clone(g.RW)
	}
	return s
}

// reach says, for a human deciding, where the command runs and what it
// will be able to reach.
func reach(workspace, dir, bin string, g *Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "runs in a sandbox of its own, not on the host\nbinary: %s\ndir: %s\nworkspace (writable): %s\n", bin, dir, workspace)
	list := func(what string, xs []string) {
		if len(xs) == 0 {
			fmt.Fprintf(&b, "%s: none\n", what)
			return
		}
		fmt.Fprintf(&b, "%s: %s\n", what, strings.Join(xs, ", "))
	}
	if g == nil {
		g = &Rule{}
	}
	list("network", g.AllowHosts)
	var secs []string
	for _, s := range g.Secrets {
		secs = append(secs, s.Name+" (to "+strings.Join(s.Hosts, ",")+")")
	}
	list("secrets (placeholders inside)", secs)
	list("host paths, read-only", g.RO)
	list("host paths, writable", g.RW)
	agent := "no"
	if g.SSHAgent {
		agent = "yes"
	}
	fmt.Fprintf(&b, "ssh agent: %s", agent)
	return b.String()
}

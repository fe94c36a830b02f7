package hostexec

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

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
	for _, flag := range r.Secrets {
		if _, err := secrets.ParseFlag(flag, secrets.DefaultSources()); err != nil {
			return fmt.Errorf("%s: secret %s: %w", name, secretName(flag), err)
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

// secretName is a --secret flag's NAME.
func secretName(flag string) string {
	at := strings.LastIndexByte(flag, '@')
	if at < 0 {
		at = len(flag)
	}
	name, _, _ := strings.Cut(flag[:at], "=")
	return name
}

// secretHosts is a --secret flag's hosts, as written.
func secretHosts(flag string) string {
	at := strings.LastIndexByte(flag, '@')
	if at < 0 {
		return ""
	}
	hosts, _, _ := strings.Cut(flag[at+1:], ":")
	return hosts
}

// SandboxArgv is the airlock command line (without the binary) that runs
// argv in workspace, in dir, with what g grants and nothing else, as the
// sandbox called name:
//
//	airlock run -q --no-config-files --name N --workspace W --workspace-mode bind --workdir D
//	    --timeout T --allow-host H... --secret S... --ro P... --rw P... -- ARGV...
//
// No config file: the user's would widen the command's sandbox past its
// rule (and start its MCP servers and host commands inside, recursively).
// No -e: no host variable reaches the command. The name lets the handler
// remove what a killed one leaves (airlock rm -f NAME); while it runs,
// airlock ls and airlock audit show it.
func SandboxArgv(name, workspace, dir string, timeout time.Duration, g *Rule, argv []string) []string {
	out := []string{"run", "-q", "--no-config-files", "--name", name, "--workspace", workspace, "--workspace-mode", "bind",
		"--protect-git", "--workdir", dir, "--timeout", (timeout + backstop).String()}
	if g != nil {
		for _, h := range g.AllowHosts {
			out = append(out, "--allow-host", h)
		}
		for _, s := range g.Secrets {
			out = append(out, "--secret", s)
		}
		for _, p := range g.RO {
			out = append(out, "--ro", p)
		}
		for _, p := range g.RW {
			out = append(out, "--rw", p)
		}
	}
	out = append(out, "--")
	return append(out, argv...)
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
		secs = append(secs, secretName(s)+" (to "+secretHosts(s)+")")
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

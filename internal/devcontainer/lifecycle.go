package devcontainer

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Wrap is argv run inside the sandbox as its first command: the lifecycle
// commands (onCreateCommand, postCreateCommand, postStartCommand, in that
// order, each once per sandbox since each run makes a new container), then
// argv. They run as argv does — inside, as the sandbox's user, under its
// policy — never on the host. A command that fails stops the run with its
// status and a line naming it. Without lifecycle commands argv is returned.
func (c *Config) Wrap(argv []string) []string {
	var s strings.Builder
	s.WriteString("step() { n=$1; shift; echo \"airlock: devcontainer: $n\" >&2; \"$@\" || { rc=$?; echo \"airlock: devcontainer: $n failed (exit $rc)\" >&2; exit $rc; }; }\n")
	any := false
	for _, lc := range []struct {
		name string
		cmd  Command
	}{{"onCreateCommand", c.OnCreate}, {"postCreateCommand", c.PostCreate}, {"postStartCommand", c.PostStart}} {
		if lc.cmd.Empty() {
			continue
		}
		any = true
		if lc.cmd.Steps == nil {
			fmt.Fprintf(&s, "step %s %s\n", quote(lc.name), argvOf(lc.cmd))
			continue
		}
		// Named steps run side by side, as the spec has it; all must succeed.
		names := make([]string, 0, len(lc.cmd.Steps))
		for n := range lc.cmd.Steps {
			names = append(names, n)
		}
		sort.Strings(names)
		s.WriteString("pids=\n")
		for _, n := range names {
			fmt.Fprintf(&s, "step %s %s & pids=\"$pids $!\"\n", quote(lc.name+" "+n), argvOf(lc.cmd.Steps[n]))
		}
		fmt.Fprintf(&s, "for p in $pids; do wait $p || { rc=$?; echo %s >&2; exit $rc; }; done\n", quote("airlock: devcontainer: "+lc.name+" failed"))
	}
	if !any {
		return argv
	}
	s.WriteString("exec \"$@\"\n")
	return append([]string{"/bin/sh", "-c", s.String(), "airlock-devcontainer"}, argv...)
}

// argvOf is cmd as quoted shell words: a string runs with /bin/sh -c, as the
// spec has it; a list runs as it is.
func argvOf(cmd Command) string {
	args := cmd.Args
	if cmd.Shell != "" {
		args = []string{"/bin/sh", "-c", cmd.Shell}
	}
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = quote(a)
	}
	return strings.Join(q, " ")
}

// quote is s as one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var varRef = regexp.MustCompile(`\$\{([A-Za-z]+)(?::([^}]*))?\}`)

// Env is the sandbox's extra environment: containerEnv, then remoteEnv, as
// KEY=VALUE. ${containerEnv:X}, ${containerWorkspaceFolder},
// ${localWorkspaceFolder} and their Basename forms are replaced (the
// workspace is at its own path inside); ${localEnv:X} is not — the host's
// environment is not the file's to hand in — and says so in notes.
func (c *Config) Env(ws string) (env, notes []string) {
	sub := func(key, v string) string {
		return varRef.ReplaceAllStringFunc(v, func(m string) string {
			p := varRef.FindStringSubmatch(m)
			switch p[1] {
			case "containerWorkspaceFolder", "localWorkspaceFolder":
				return ws
			case "containerWorkspaceFolderBasename", "localWorkspaceFolderBasename":
				return filepath.Base(ws)
			case "containerEnv":
				name, def, _ := strings.Cut(p[2], ":")
				if v, ok := c.ContainerEnv[name]; ok {
					return v
				}
				return def
			case "localEnv", "env":
				notes = append(notes, fmt.Sprintf("%s: %s: %s left empty: the host's environment reaches the sandbox only through -e, which you choose", c.File, key, m))
				_, def, _ := strings.Cut(p[2], ":")
				return def
			}
			return m
		})
	}
	for _, m := range []map[string]string{c.ContainerEnv, c.RemoteEnv} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			env = append(env, k+"="+sub(k, m[k]))
		}
	}
	return env, notes
}

// Workdir is where the run starts: workspaceFolder when it names the
// workspace or a directory in it, else the workspace (with a note).
func (c *Config) Workdir(ws string) (string, string) {
	if c.WorkspaceFolder == "" {
		return "", ""
	}
	w := strings.NewReplacer("${containerWorkspaceFolder}", ws, "${localWorkspaceFolder}", ws).Replace(c.WorkspaceFolder)
	if filepath.IsAbs(w) && within(ws, filepath.Clean(w)) {
		return filepath.Clean(w), ""
	}
	return "", fmt.Sprintf("%s: workspaceFolder %q ignored: the workspace is at its own path %s inside", c.File, c.WorkspaceFolder, ws)
}

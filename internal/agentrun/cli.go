package agentrun

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/images"
)

// CLI is where an agent's command was found.
type CLI struct {
	Path    string   // the command to run (the same path inside)
	Expose  []string // host dirs to show read-only so it runs (none if visible anyway)
	Version string   // "" if unknown
	Where   string   // "airlock", "PATH" or "image"
}

// Find finds the agent's CLI: airlock's own install first (its pinned
// version), then the host's PATH. In a docker sandbox it is the image's.
func Find(p *agents.Profile, docker bool) (CLI, error) {
	if docker {
		// The image's own PATH is not the sandbox's: name the command whole.
		return CLI{Path: images.AgentsBin + "/" + p.Binary, Where: "image"}, nil
	}
	if dir, err := InstallDir(p.Name); err == nil {
		bin := filepath.Join(dir, "node_modules", ".bin", p.Binary)
		if _, err := os.Stat(bin); err == nil {
			return CLI{Path: bin, Expose: []string{dir}, Version: PackageVersion(bin, p.Package), Where: "airlock"}, nil
		}
	}
	bin, err := exec.LookPath(p.Binary)
	if err != nil {
		if p.Package == "" {
			return CLI{}, fmt.Errorf("%s (%s) is not installed and airlock cannot install it: %s", p.Display, p.Binary, p.Install)
		}
		return CLI{}, fmt.Errorf("%s (%s) is not installed: airlock agent install %s (npm %s@%s), or put %s on PATH", p.Display, p.Binary, p.Name, p.Package, p.Version, p.Binary)
	}
	bin, _ = filepath.Abs(bin)
	cli := CLI{Path: bin, Version: PackageVersion(bin, p.Package), Where: "PATH"}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return cli, nil
	}
	// An npm install keeps the command's code (and, for Codex, a native
	// binary in a sibling package) in a node_modules tree: show all of it,
	// and the link's own dir when the link is outside the tree (a global
	// bin dir, a linked node_modules). Elsewhere, what the sandbox cannot
	// see (a home, /tmp) is shown.
	if nm := nodeModulesRoot(real); nm != "" {
		cli.Expose = []string{nm}
		if !under(bin, nm) {
			cli.Expose = append(cli.Expose, filepath.Dir(bin))
		}
	} else if home, _ := os.UserHomeDir(); under(real, home) || under(real, os.TempDir()) {
		cli.Expose = []string{filepath.Dir(real)}
	}
	return cli, nil
}

// nodeModulesRoot is the dir holding the outermost node_modules above p, "" if none.
func nodeModulesRoot(p string) string {
	i := strings.Index(p, "/node_modules/")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	return dir != "" && dir != "/" && (p == dir || strings.HasPrefix(p, dir+"/"))
}

// PackageVersion reads the version of npm package pkg from the
// package.json above bin's real path; "" if not found.
func PackageVersion(bin, pkg string) string {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil || pkg == "" {
		return ""
	}
	for d := filepath.Dir(real); d != filepath.Dir(d); d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "package.json"))
		if err != nil {
			continue
		}
		var m struct{ Name, Version string }
		if json.Unmarshal(b, &m) == nil && m.Name == pkg {
			return m.Version
		}
	}
	return ""
}

package agentrun

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/agents"
)

// Install installs p's CLI from npm into airlock's data dir at version (""
// for the profile's pinned one), npm's output to out. It returns the
// version found installed.
func Install(p *agents.Profile, version string, out io.Writer) (string, error) {
	if p.Package == "" {
		return "", fmt.Errorf("%s is not on npm: %s", p.Display, p.Install)
	}
	if version == "" {
		version = p.Version
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", errors.New("npm is not on PATH: install Node.js and npm (e.g. apt install npm), then try again")
	}
	dir, err := InstallDir(p.Name)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	pkg := p.Package + "@" + version
	fmt.Fprintf(out, "airlock: installing %s into %s (npm; this downloads from the npm registry)...\n", pkg, dir)
	cmd := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--save-exact", pkg)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("npm install %s: %v (npm's output is above)", pkg, err)
	}
	bin := filepath.Join(dir, "node_modules", ".bin", p.Binary)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("npm installed %s but %s is missing", pkg, bin)
	}
	return PackageVersion(bin, p.Package), nil
}

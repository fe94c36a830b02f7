package devcontainer

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/regfile"
)

// Loaded is a devcontainer.json with what its trust covers: the file and
// the Dockerfile it names, read once, so that what is checked is what is used.
type Loaded struct {
	*Config
	Data       []byte // the content of File
	Dockerfile []byte // the content of Build.Dockerfile, nil without a build
	Bundle     []byte // what trust is recorded for (see bundle)
}

// Load reads file (absolute, inside workspace ws) and the Dockerfile it
// names: regular files only, never through a link, bounded.
func Load(ws, file string) (*Loaded, error) {
	if !inside(ws, filepath.Dir(file)) {
		return nil, fmt.Errorf("devcontainer: %s is outside the workspace %s (or reached through a link out of it)", file, ws)
	}
	data, err := regfile.Read(file, MaxFileSize, false)
	if err != nil {
		return nil, fmt.Errorf("devcontainer: read %s: %w", file, err)
	}
	c, err := Parse(file, data)
	if err != nil {
		return nil, err
	}
	l := &Loaded{Config: c, Data: data}
	if c.Build != nil {
		if !inside(ws, c.Build.Context) {
			return nil, fmt.Errorf("devcontainer: %s: build.context %s is outside the workspace %s", file, c.Build.Context, ws)
		}
		if !within(c.Build.Context, c.Build.Dockerfile) || !inside(ws, filepath.Dir(c.Build.Dockerfile)) {
			return nil, fmt.Errorf("devcontainer: %s: build.dockerfile %s is outside build.context %s", file, c.Build.Dockerfile, c.Build.Context)
		}
		if l.Dockerfile, err = regfile.Read(c.Build.Dockerfile, MaxFileSize, false); err != nil {
			return nil, fmt.Errorf("devcontainer: read the Dockerfile: %w", err)
		}
	}
	l.Bundle = bundle(file, data, c, l.Dockerfile)
	return l, nil
}

// bundle is what trust covers: the file, and the Dockerfile it builds from,
// each with its length so that no two bundles read alike.
func bundle(file string, data []byte, c *Config, dockerfile []byte) []byte {
	var b strings.Builder
	b.WriteString(file + " " + strconv.Itoa(len(data)) + "\n")
	b.Write(data)
	if c.Build != nil {
		b.WriteString("\n" + c.Build.Dockerfile + " " + strconv.Itoa(len(dockerfile)) + "\n")
		b.Write(dockerfile)
	}
	return []byte(b.String())
}

// within reports whether p is dir or below it (both cleaned, absolute).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// inside reports whether directory dir is ws or below it, both as written
// and with links resolved: a directory link in the repository must not
// lead the reads (or the build context) out of the workspace.
func inside(ws, dir string) bool {
	if !within(ws, dir) {
		return false
	}
	rws, err1 := filepath.EvalSymlinks(ws)
	rdir, err2 := filepath.EvalSymlinks(dir)
	return err1 == nil && err2 == nil && within(rws, rdir)
}

// CheckTrust says whether l may be used: trusted with exactly this file and
// Dockerfile, recorded in the user's config dir cdir.
func (l *Loaded) CheckTrust(cdir string) error {
	switch config.CheckTrust(cdir, l.File, l.Bundle) {
	case config.Trusted:
		return nil
	case config.Changed:
		return fmt.Errorf("devcontainer: %s (or the Dockerfile it names) changed since you trusted it; review it, then: airlock trust --devcontainer=%s", l.File, l.File)
	case config.NoDir:
		return fmt.Errorf("devcontainer: %s cannot be trusted: there is no config directory to record trust in (set HOME or XDG_CONFIG_HOME)", l.File)
	}
	return fmt.Errorf("devcontainer: %s is not trusted: it runs commands and builds an image as the repository says; review it, then: airlock trust --devcontainer=%s", l.File, l.File)
}

// Trust records that l may be used (see CheckTrust).
func (l *Loaded) Trust(cdir string) error {
	return config.Trust(cdir, l.File, l.Bundle)
}

func hashOf(b []byte) string { return config.ContentHash(b) }

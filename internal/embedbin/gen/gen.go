// Package gen builds an executable for internal/embedbin to embed, and
// names the sources it is built from: the command internal/guestbin/gen,
// which `go generate` runs, is this with its package and tags.
package gen

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Target is what to build: Pkg (a main package, relative to the directory
// go generate runs in) with Tags, into Out (a path relative to it too,
// whose directory is embedded), static and stripped, its identity in
// Out+".id".
type Target struct {
	Pkg, Tags, Out string
}

// Main is a generator's main: it builds t, or with -id prints the identity
// of t's sources as they are now and builds nothing (the staleness tests'
// check).
func Main(t Target) {
	idOnly := flag.Bool("id", false, "print the identity of the sources and build nothing")
	flag.Parse()
	if err := run(t, *idOnly); err != nil {
		fmt.Fprintf(os.Stderr, "gen %s: %v\n", t.Pkg, err)
		os.Exit(1)
	}
}

func run(t Target, idOnly bool) error {
	id, err := Identity(t)
	if err != nil {
		return err
	}
	if idOnly {
		fmt.Println(id)
		return nil
	}
	// Concurrent runs (test binaries building airlock at once) each build
	// their own and rename it into place: the same bytes, as builds are
	// reproducible.
	dir := filepath.Dir(t.Out)
	f, err := os.CreateTemp(dir, ".new-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	args := []string{"build", "-ldflags=-s -w -buildid=", "-o", tmp}
	if t.Tags != "" {
		args = append(args, "-tags", t.Tags)
	}
	build := exec.Command("go", append(args, t.Pkg)...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build: %w", err)
	}
	if err := os.Rename(tmp, t.Out); err != nil {
		return err
	}
	// Written last, atomically: an identity never names an executable that is not there.
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, t.Out+".id")
}

// Identity names t's sources as they are now: a sha256 over the Go
// toolchain, the target, the tags, and every Go, assembly and embedded file
// of each non-standard package t is built from (the standard library's are
// named by the toolchain's version), then the target ("linux/amd64"), which
// the airlock binary checks against its own before it runs the executable.
func Identity(t Target) (string, error) {
	target, err := exec.Command("go", "env", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	goos, goarch, _ := strings.Cut(strings.TrimSpace(string(target)), "\n")
	list := exec.Command("go", "list", "-deps", "-tags", t.Tags, "-f",
		`{{if not .Standard}}{{.ImportPath}}{{"\t"}}{{.Dir}}{{range .GoFiles}}{{"\t"}}{{.}}{{end}}{{range .SFiles}}{{"\t"}}{{.}}{{end}}{{range .EmbedFiles}}{{"\t"}}{{.}}{{end}}{{end}}`, t.Pkg)
	list.Env = append(os.Environ(), "CGO_ENABLED=0")
	list.Stderr = os.Stderr
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w", t.Pkg, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s %s\n", runtime.Version(), goos, goarch, t.Tags)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 2 {
			continue // a standard package
		}
		fmt.Fprintf(h, "package %s\n", f[0])
		for _, name := range f[2:] {
			if err := hashFile(h, name, filepath.Join(f[1], name)); err != nil {
				return "", err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)) + " " + goos + "/" + goarch, nil
}

func hashFile(h io.Writer, name, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "file %s %d\n", name, len(b))
	h.Write(b)
	return nil
}

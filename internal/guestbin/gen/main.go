// Command gen builds the native backend's lean guest (../lean) into ../bin,
// static and stripped, with its identity beside it: run it through
// `go generate ./internal/guestbin`. With -id it prints the identity of the
// sources as they are now and builds nothing (the staleness test's check).
package main

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

// leanPkg is the guest's main package, relative to internal/guestbin.
const leanPkg = "./lean"

// tags build the guest for the native backend alone: internal/guest leaves
// out what only a VM's guest needs (its FUSE server).
const tags = "airlock_native_guest"

func main() {
	idOnly := flag.Bool("id", false, "print the identity of the lean guest's sources and build nothing")
	flag.Parse()
	if err := run(*idOnly); err != nil {
		fmt.Fprintln(os.Stderr, "guestbin/gen:", err)
		os.Exit(1)
	}
}

func run(idOnly bool) error {
	id, err := Identity()
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
	f, err := os.CreateTemp("bin", ".guest-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	build := exec.Command("go", "build", "-tags", tags, "-trimpath", "-ldflags=-s -w -buildid=", "-o", tmp, leanPkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("build %s: %w", leanPkg, err)
	}
	if err := os.Rename(tmp, filepath.Join("bin", "guest")); err != nil {
		return err
	}
	// Written last, atomically: an identity never names a guest that is not there.
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join("bin", "guest.id"))
}

// Identity names the lean guest's sources as they are now: a sha256 over
// the Go toolchain, the target, and every Go and assembly file of each
// non-standard package the guest is built from (the standard library's are
// named by the toolchain's version), then the target ("linux/amd64"), which
// the airlock binary checks against its own before it runs the guest.
func Identity() (string, error) {
	target, err := exec.Command("go", "env", "GOOS", "GOARCH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	goos, goarch, _ := strings.Cut(strings.TrimSpace(string(target)), "\n")
	list := exec.Command("go", "list", "-deps", "-tags", tags, "-f",
		`{{if not .Standard}}{{.ImportPath}}{{"\t"}}{{.Dir}}{{range .GoFiles}}{{"\t"}}{{.}}{{end}}{{range .SFiles}}{{"\t"}}{{.}}{{end}}{{end}}`, leanPkg)
	list.Env = append(os.Environ(), "CGO_ENABLED=0")
	list.Stderr = os.Stderr
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list %s: %w", leanPkg, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %s/%s %s\n", runtime.Version(), goos, goarch, tags)
	sc := bufio.NewScanner(bytes.NewReader(out))
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

package vm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend"
	"golang.org/x/sys/unix"
)

// --protect-git's read-only paths hold in a VM's shares as they do in a
// native mount plan: a read-only file inside the workspace refuses every
// change, a read-only dir refuses new names, a pinned git dir cannot be
// renamed; what a commit writes stays writable.
func TestSharesHoldTheWorkspacesReadOnlyGitPaths(t *testing.T) {
	ws := t.TempDir()
	git := filepath.Join(ws, ".git")
	for _, d := range []string{"hooks", "objects/info", "refs"} {
		if err := os.MkdirAll(filepath.Join(git, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"config", "commondir", "objects/info/alternates"} {
		if err := os.WriteFile(filepath.Join(git, f), []byte("[core]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec := &backend.Spec{Workspace: ws,
		RO: []string{filepath.Join(git, "config"), filepath.Join(git, "commondir"), filepath.Join(git, "hooks"), filepath.Join(git, "objects/info/alternates")},
		RW: []string{git, filepath.Join(git, "objects"), filepath.Join(git, "objects/info"), filepath.Join(git, "refs")}}
	r, _, closers, err := shares(spec, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	in := func(rel string) string { return filepath.Join(ws, rel) }
	refused := map[string]error{}
	if f, err := r.Open(in(".git/config"), unix.O_WRONLY); err == nil {
		f.Close()
		refused["write .git/config"] = nil
	}
	if f, err := r.Create(in(".git/commondir"), unix.O_WRONLY|unix.O_TRUNC, 0o644); err == nil {
		f.Close()
		refused["truncate .git/commondir"] = nil
	}
	if f, err := r.Create(in(".git/hooks/pre-commit"), unix.O_WRONLY, 0o755); err == nil {
		f.Close()
		refused["create a hook"] = nil
	}
	if err := r.Rename(in(".git/config"), in(".git/config.old")); err == nil {
		refused["rename .git/config away"] = nil
	}
	if f, err := r.Create(in(".git/HEAD.lock"), unix.O_WRONLY, 0o644); err != nil {
		t.Fatalf("create .git/HEAD.lock: %v", err)
	} else {
		f.Close()
	}
	if err := r.Rename(in(".git/HEAD.lock"), in(".git/config")); err == nil {
		refused["rename over .git/config"] = nil
	}
	if err := r.Link(in(".git/objects/info/alternates"), in(".git/objects/info/a2")); err == nil {
		refused["hard-link alternates"] = nil
	}
	if err := r.Remove(in(".git/objects/info/alternates")); err == nil {
		refused["remove alternates"] = nil
	}
	if err := r.Rename(in(".git"), in(".git.old")); err == nil {
		refused["rename .git"] = nil
	}
	for what := range refused {
		t.Errorf("%s: allowed", what)
	}
	// What a commit writes.
	f, err := r.Create(in(".git/index.lock"), unix.O_WRONLY|unix.O_EXCL, 0o644)
	if err != nil {
		t.Fatalf("create .git/index.lock: %v", err)
	}
	f.Close()
	if err := r.Rename(in(".git/index.lock"), in(".git/index")); err != nil {
		t.Errorf("rename index.lock into place: %v", err)
	}
	if f, err := r.Create(in(".git/refs/main"), unix.O_WRONLY, 0o644); err != nil {
		t.Errorf("write a ref: %v", err)
	} else {
		f.Close()
	}
	if b, _ := os.ReadFile(filepath.Join(git, "config")); string(b) != "[core]\n" {
		t.Errorf(".git/config on the host: %q", b)
	}
}

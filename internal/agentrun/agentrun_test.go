package agentrun

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/secrets"
)

func TestWriteHomeFilesNeverFollowsALinkTheSandboxPlanted(t *testing.T) {
	home, outside := t.TempDir(), t.TempDir()
	// A sandbox could leave these in the agent's home between runs.
	if err := os.Symlink(outside, filepath.Join(home, ".claude")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(home, ".claude.json")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched"), 0o600)

	err := WriteHomeFiles(home, map[string][]byte{".claude/settings.json": []byte("{}")})
	if err == nil || !strings.Contains(err.Error(), "not a plain directory") {
		t.Errorf("a linked directory: err = %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "settings.json")); err == nil {
		t.Error("the write went through the link, out of the home")
	}
	if err := WriteHomeFiles(home, map[string][]byte{".claude.json": []byte(`{"ok":true}`)}); err != nil {
		t.Fatalf("a linked file is replaced, not followed: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "victim")); string(b) != "untouched" {
		t.Errorf("the link's target was written: %q", b)
	}
	st, err := os.Lstat(filepath.Join(home, ".claude.json"))
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Errorf(".claude.json: %v %v, want a private regular file", st, err)
	}
}

func TestWriteHomeFilesRefusesPathsOutOfTheHome(t *testing.T) {
	home := t.TempDir()
	for _, p := range []string{"../x", "/etc/x", "a/../../x", ""} {
		if err := WriteHomeFiles(home, map[string][]byte{p: nil}); err == nil {
			t.Errorf("%q: written", p)
		}
	}
	if err := WriteHomeFiles(home, map[string][]byte{"a/b/c.json": []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(home, "a", "b")); st == nil || st.Mode().Perm() != 0o700 {
		t.Errorf("made directories: %v, want 0700", st)
	}
}

func TestValidSessionID(t *testing.T) {
	for id, want := range map[string]bool{
		"0b3c0e3a-5d2e-4f7a-9a51-2f1f6c2a9e11": true,
		"ses_4f2a9c":                           true,
		"":                                     false,
		"../../etc/passwd":                     false,
		"-rf":                                  false,
		".hidden":                              false,
		"a b":                                  false,
		strings.Repeat("a", 129):               false,
	} {
		if got := ValidSessionID(id); got != want {
			t.Errorf("ValidSessionID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestFindSessionResolvesLastAnIDOrAPrefixWithinTheProject(t *testing.T) {
	t.Setenv("AIRLOCK_DATA_DIR", t.TempDir())
	p := &agents.Profile{Name: "claude", Display: "Claude Code"}
	for i, id := range []string{"aaa-111", "aab-222", "bbb-333"} {
		project := "/src/one"
		if id == "bbb-333" {
			project = "/src/two"
		}
		p.FindSession = func(string, time.Time) (string, error) { return id, nil }
		RecordSession(p, project, project, "/h", time.Now(), i, io.Discard, true)
		time.Sleep(10 * time.Millisecond) // ordered by end time
	}
	for _, c := range []struct{ ref, project, want, err string }{
		{"last", "/src/one", "aab-222", ""},
		{"aaa-111", "/src/one", "aaa-111", ""},
		{"aaa", "/src/one", "aaa-111", ""},
		{"aa", "/src/one", "", "give more of the id"},
		{"bbb", "/src/one", "", "belongs to /src/two"},
		{"zzz", "/src/one", "", "no such"},
		{"last", "/src/three", "", "no claude session recorded"},
	} {
		s, err := FindSession("claude", c.project, c.ref)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("--resume %s in %s: %v, want an error saying %q", c.ref, c.project, err, c.err)
			}
			continue
		}
		if err != nil || s.ID != c.want {
			t.Errorf("--resume %s in %s = %q, %v; want %q", c.ref, c.project, s.ID, err, c.want)
		}
	}
}

func TestAgentKeysBecomePlaceholdersAndNoKeyNamesTheVariables(t *testing.T) {
	p := &agents.Profile{Name: "x", Display: "X", Keys: []agents.Key{
		{Env: "CODEX_API_KEY", From: []string{"CODEX_API_KEY", "OPENAI_API_KEY"}, Hosts: []string{"api.openai.com"}, Prefix: "sk-"},
	}}
	t.Setenv("CODEX_API_KEY", "")
	t.Setenv("OPENAI_API_KEY", "")
	if _, _, err := Keys(p, nil); err == nil || !strings.Contains(err.Error(), "CODEX_API_KEY or OPENAI_API_KEY") {
		t.Errorf("no key: %v, want the variables named", err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-real-value-0123456789")
	secs, keys, err := Keys(p, nil)
	if err != nil || len(secs) != 1 {
		t.Fatalf("Keys: %v %v", secs, err)
	}
	ph := keys["CODEX_API_KEY"]
	if !strings.HasPrefix(ph, "sk-airlock-ph-") || strings.Contains(ph, "real-value") {
		t.Errorf("placeholder %q: want sk-airlock-ph-…, never the value", ph)
	}
	if secs, _, err := Keys(p, []secrets.Spec{mustSpec(t, "CODEX_API_KEY=file:/k@api.openai.com")}); err != nil || len(secs) != 0 {
		t.Errorf("a key the user gave with --secret is theirs: %v %v", secs, err)
	}
}

func TestNpmTreesAreExposedWhole(t *testing.T) {
	if got := nodeModulesRoot("/opt/a/node_modules/@openai/codex/bin/codex.js"); got != "/opt/a" {
		t.Errorf("nodeModulesRoot = %q", got)
	}
}

func TestAnAgentInALinkedNodeModulesTreeIsFoundAndShownWhole(t *testing.T) {
	t.Setenv("AIRLOCK_DATA_DIR", t.TempDir())
	real, other := t.TempDir(), t.TempDir()
	pkg := filepath.Join(real, "node_modules", "fake-agent", "bin")
	os.MkdirAll(pkg, 0o755)
	os.WriteFile(filepath.Join(real, "node_modules", "fake-agent", "package.json"), []byte(`{"name":"fake-agent","version":"1.2.3"}`), 0o644)
	os.WriteFile(filepath.Join(pkg, "agent.js"), []byte("#!/bin/sh\n"), 0o755)
	os.MkdirAll(filepath.Join(real, "node_modules", ".bin"), 0o755)
	os.Symlink("../fake-agent/bin/agent.js", filepath.Join(real, "node_modules", ".bin", "fake-agent"))
	// Another tree whose node_modules is a link to the first (far apart).
	os.Symlink(filepath.Join(real, "node_modules"), filepath.Join(other, "node_modules"))
	t.Setenv("PATH", filepath.Join(other, "node_modules", ".bin"))
	done := make(chan CLI, 1)
	go func() {
		cli, err := Find(&agents.Profile{Name: "fake", Binary: "fake-agent", Package: "fake-agent"}, false)
		if err != nil {
			t.Error(err)
		}
		done <- cli
	}()
	select {
	case cli := <-done:
		if cli.Version != "1.2.3" || !slices.Contains(cli.Expose, real) || !slices.Contains(cli.Expose, filepath.Join(other, "node_modules", ".bin")) {
			t.Errorf("found %+v: want version 1.2.3, the real tree and the link's dir shown", cli)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Find does not return")
	}
}

// TestChownTreeNeverFollowsALinkTheSandboxPlanted: run as root for
// another uid, ChownTree gives the home away; links planted in it (to a
// file and a directory outside) are changed themselves, their targets
// keep their owner.
func TestChownTreeNeverFollowsALinkTheSandboxPlanted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	home, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(home, "a", "b"), 0o700)
	os.WriteFile(filepath.Join(home, "a", "b", "f"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(outside, "victim"), []byte("x"), 0o600)
	os.Mkdir(filepath.Join(outside, "dir"), 0o700)
	os.WriteFile(filepath.Join(outside, "dir", "inner"), []byte("x"), 0o600)
	os.Symlink(filepath.Join(outside, "victim"), filepath.Join(home, "a", "link-file"))
	os.Symlink(filepath.Join(outside, "dir"), filepath.Join(home, "a", "link-dir"))
	const uid, gid = 54321, 54321
	if err := ChownTree(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) int {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return int(st.Uid)
	}
	for _, p := range []string{home, filepath.Join(home, "a", "b", "f"), filepath.Join(home, "a", "link-file"), filepath.Join(home, "a", "link-dir")} {
		if owner(p) != uid {
			t.Errorf("%s: owner %d, want %d", p, owner(p), uid)
		}
	}
	for _, p := range []string{filepath.Join(outside, "victim"), filepath.Join(outside, "dir"), filepath.Join(outside, "dir", "inner")} {
		if owner(p) != 0 {
			t.Errorf("%s, outside the home, now belongs to %d", p, owner(p))
		}
	}
}

func mustSpec(t *testing.T, flag string) secrets.Spec {
	t.Helper()
	sp, err := secrets.ParseSpec(flag)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

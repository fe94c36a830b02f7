package workspace

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHidePatternsMatchAsGitignoreDoes(t *testing.T) {
	for name, tc := range map[string]struct {
		pattern string
		rel     string
		dir     bool
		want    bool
	}{
		"a name matches at the root":                   {".env", ".env", false, true},
		"a name matches at any depth":                  {".env", "svc/api/.env", false, true},
		"a name is not a prefix":                       {".env", ".envrc", false, false},
		"a glob on names":                              {".env.*", "svc/.env.production", false, true},
		"a glob does not cross a slash":                {"*.pem", "certs/x.pem", false, true},
		"a star does not match a slash in an anchored": {"config/*.key", "config/sub/x.key", false, false},
		"an anchored pattern matches from the root":    {"config/*.key", "config/x.key", false, true},
		"an anchored pattern does not float":           {"config/*.key", "app/config/x.key", false, false},
		"a leading slash anchors a name":               {"/secrets", "secrets", true, true},
		"a leading slash does not float":               {"/secrets", "app/secrets", true, false},
		"double star matches no directory":             {"**/prod/*.key", "prod/a.key", false, true},
		"double star matches many directories":         {"**/prod/*.key", "a/b/c/prod/a.key", false, true},
		"double star in the middle":                    {"deploy/**/tfstate", "deploy/x/y/tfstate", false, true},
		"dir/** is the directory":                      {"certs/**", "certs", true, true},
		"a trailing slash needs a directory":           {"build/", "build", false, false},
		"a trailing slash matches a directory":         {"build/", "src/build", true, true},
		"case matters":                                 {".env", ".ENV", false, false},
		"id_ prefix":                                   {"id_*", "home/id_ed25519", false, true},
		"a class":                                      {"*.[kp]e[my]", "a.key", false, true},
		"./ is the root":                               {"./terraform.tfstate", "terraform.tfstate", false, true},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := NewHider([]string{tc.pattern})
			if err != nil {
				t.Fatal(err)
			}
			if got := h.Match(tc.rel, tc.dir); got != tc.want {
				t.Errorf("Match(%q, dir=%v) with %q = %v, want %v", tc.rel, tc.dir, tc.pattern, got, tc.want)
			}
		})
	}
}

func TestHidePatternsThatCannotWorkAreRefusedInOneLine(t *testing.T) {
	for name, p := range map[string]string{
		"an empty pattern":        "",
		"the root":                "/",
		"everything":              "**",
		"a climb out":             "../secrets",
		"a climb in the middle":   "a/../../b",
		"negation":                "!keep.pem",
		"an unclosed class":       "[a-",
		"an unclosed class later": "a/[b",
		"too long":                strings.Repeat("a", 2000),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewHider([]string{p})
			if err == nil {
				t.Fatalf("NewHider(%q): no error", p)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, strconv.Quote(p)+": ") {
				t.Errorf("NewHider(%q) = %q, want one line naming the pattern", p, msg)
			}
		})
	}
}

func TestCoversHidesWhatIsBelowAHiddenDirectory(t *testing.T) {
	h, err := NewHider([]string{"secrets/", "*.pem"})
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]bool{"secrets": true, "secrets/a/b.txt": true, "x/secrets/y": true, "a/b.pem/c": true, "src/main.go": false} {
		if got := h.Covers(rel); got != want {
			t.Errorf("Covers(%q) = %v, want %v", rel, got, want)
		}
	}
}

func TestFindHiddenFollowsLinksButNeverHidesTheWorkspace(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".env", "TOKEN=1")
	write("svc/.env.prod", "TOKEN=2")
	write("certs/inner/a.pem", "pem")
	write("real/secret.txt", "s")
	write("src/main.go", "package main")
	os.Symlink("real/secret.txt", filepath.Join(root, "app.key"))          // a link named like a secret: its target
	os.Symlink(".", filepath.Join(root, "id_loop"))                        // a link to the workspace: never masked
	os.Symlink("/", filepath.Join(root, "id_root"))                        // nor to what holds it
	os.Symlink("/bin/sh", filepath.Join(root, "sh.key"))                   // nor a host path outside it
	os.Link(filepath.Join(root, ".env"), filepath.Join(root, "notes.txt")) // another name of a hidden file
	h, err := NewHider([]string{".env", ".env.*", "certs/", "*.key", "id_*"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := FindHidden(root, h, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i] = strings.TrimPrefix(got[i], root+"/")
	}
	slices.Sort(got)
	want := []string{".env", "certs", "notes.txt", "real/secret.txt", "svc/.env.prod"}
	if !slices.Equal(got, want) {
		t.Errorf("FindHidden = %q, want %q", got, want)
	}
}

func TestFindHiddenRefusesMoreMatchesThanItCanMask(t *testing.T) {
	root := t.TempDir()
	for i := range MaxHidden + 1 {
		if err := os.WriteFile(filepath.Join(root, strconv.Itoa(i)+".pem"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := NewHider([]string{"*.pem"})
	if _, err := FindHidden(root, h, ""); err == nil || !strings.Contains(err.Error(), "hide the directories that hold them") {
		t.Errorf("FindHidden over %d matches: %v", MaxHidden+1, err)
	}
}

func FuzzHidePattern(f *testing.F) {
	f.Add("**/a/**/b/**/c", "a/x/b/y/c")
	f.Add(".env.*", "svc/.env.prod")
	f.Add("[", "x")
	f.Add("a/**", "a/b/c")
	f.Fuzz(func(t *testing.T, pattern, rel string) {
		h, err := NewHider([]string{pattern})
		if err != nil {
			return
		}
		if h.Match(rel, false) && !h.Covers(rel) {
			t.Fatalf("%q matches %q but does not cover it", pattern, rel)
		}
	})
}

func TestFindHiddenReusesUnchangedDirectoriesAndSeesEveryChange(t *testing.T) {
	root := t.TempDir()
	cache := filepath.Join(t.TempDir(), "hide-cache")
	for _, d := range []string{"a/b", "c"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "a/b/.env"), nil, 0o644)
	time.Sleep(2 * settled) // directories changed in the same tick as a walk are read again
	h, _ := NewHider([]string{".env", "*.pem"})
	find := func() []string {
		t.Helper()
		got, err := FindHidden(root, h, cache)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			got[i] = strings.TrimPrefix(got[i], root+"/")
		}
		slices.Sort(got)
		return got
	}
	if got := find(); !slices.Equal(got, []string{"a/b/.env"}) {
		t.Fatalf("first walk = %q", got)
	}
	// The second walk takes an unchanged directory's names from the cache:
	// a name planted there shows it was not read again.
	data, _ := os.ReadFile(cache)
	planted := strings.Replace(string(data), `"f":[".env"]`, `"f":[".env","planted"]`, 1)
	if planted == string(data) {
		t.Fatalf("cache without a/b's match: %s", data)
	}
	os.WriteFile(cache, []byte(planted), 0o600)
	if got := find(); !slices.Equal(got, []string{"a/b/.env", "a/b/planted"}) {
		t.Fatalf("second walk = %q; want the cached names of the unchanged a/b", got)
	}
	// A new secret changes its directory: seen. So is one whose directory's
	// mtime was set back (utimes changes ctime, which only the kernel sets).
	os.WriteFile(filepath.Join(root, "c/server.pem"), nil, 0o644)
	old := time.Now().Add(-time.Hour)
	os.WriteFile(filepath.Join(root, "a/.env"), nil, 0o644)
	os.Chtimes(filepath.Join(root, "a"), old, old)
	if got := find(); !slices.Equal(got, []string{"a/.env", "a/b/.env", "a/b/planted", "c/server.pem"}) {
		t.Fatalf("after changes = %q", got)
	}
	// Other patterns: the cache is not used.
	h, _ = NewHider([]string{".env"})
	if got := find(); !slices.Equal(got, []string{"a/.env", "a/b/.env"}) {
		t.Fatalf("with other patterns = %q", got)
	}
}

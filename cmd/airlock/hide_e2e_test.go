//go:build linux

package main

// Files hidden by pattern: secrets in the workspace (the built-in set and
// --hide globs) read as nothing inside in every workspace mode, through
// links too; they are never copied, shown in a diff or overwritten by an
// apply. Judged by reading with real cat and python3 inside, and by the
// host's files after.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hideCanary is in every secret's content: it must never show inside.
const hideCanary = "hostsecret-7f3a"

// hideWorkspace writes secrets the built-in set and the test's --hide
// patterns match, and what they must not hide.
func hideWorkspace(e *env) {
	for _, p := range []string{".env", "svc/.env.production", "certs/server.pem", "config/prod.key", "keys/id_ed25519", "deploy/state/terraform.tfstate"} {
		e.write(p, hideCanary+" in "+p+"\n")
	}
	e.write("main.go", "package main\n")
	e.write("svc/app.py", "print('app')\n")
	// Other ways to the same bytes: a symlink (reading through it must
	// fail) and, made before the start, a hard link.
	if err := os.Symlink(".env", filepath.Join(e.ws, "settings.txt")); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Link(filepath.Join(e.ws, ".env"), filepath.Join(e.ws, "notes.txt")); err != nil {
		e.t.Fatal(err)
	}
	// On a case-sensitive file system .ENV is another file: not hidden.
	e.write(".ENV", "upper case is another file\n")
}

// readAll reads each path with cat and with python3, one line each.
const readAll = `for f in .env svc/.env.production certs/server.pem config/prod.key keys/id_ed25519 deploy/state/terraform.tfstate settings.txt notes.txt .ENV main.go; do
	printf '%s cat=[%s] ' "$f" "$(cat "$f" 2>&1 | tr '\n' ' ')"
	python3 -c 'import sys
try:
    print("py=[%s]" % open(sys.argv[1]).read().strip())
except Exception as e:
    print("py=<%s>" % type(e).__name__)' "$f"
done`

func TestHiddenFilesShowNothingInsideInEveryWorkspaceMode(t *testing.T) {
	for _, mode := range []string{"bind", "overlay", "copy"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			hideWorkspace(e)
			r := e.sh(readAll, "--workspace-mode", mode, "--hide", "deploy/**")
			if r.code != 0 {
				t.Fatalf("run: %v", r)
			}
			if strings.Contains(r.stdout, hideCanary) {
				t.Errorf("a hidden file's content showed inside:\n%s", r.stdout)
			}
			lines := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				name, rest, _ := strings.Cut(l, " ")
				lines[name] = rest
			}
			// Not hidden: the positive controls.
			if !strings.Contains(lines["main.go"], "py=[package main]") || !strings.Contains(lines[".ENV"], "py=[upper case is another file]") {
				t.Errorf("files no pattern matches should read as they are: %q", lines)
			}
			// Bind and overlay: an empty read-only file in its place (the
			// path is a mount: it cannot be replaced or removed; the vm
			// backend: an empty directory). Copy: absent, never copied. An overlay the backend cannot make is a
			// copy (said on stderr).
			for _, p := range []string{".env", "svc/.env.production", "certs/server.pem", "config/prod.key", "keys/id_ed25519", "settings.txt", "notes.txt"} {
				empty := strings.Contains(lines[p], "cat=[] py=[]")
				if testBackend() == "vm" {
					// The VM's file share shows a hidden file as an empty
					// read-only directory.
					empty = strings.Contains(lines[p], "Is a directory") && strings.Contains(lines[p], "py=<IsADirectoryError>")
				}
				absent := strings.Contains(lines[p], "No such file") && strings.Contains(lines[p], "py=<FileNotFoundError>")
				if mode == "bind" && !empty || !empty && !absent {
					t.Errorf("%s inside: %q; want empty (bind, overlay) or absent (copy)", p, lines[p])
				}
			}
			// A hidden directory: empty, or absent in a copy.
			if l := lines["deploy/state/terraform.tfstate"]; !strings.Contains(l, "No such file") {
				t.Errorf("deploy/** should hide the directory: %q", l)
			}
			// The host's secrets are as they were.
			if got := e.read(".env"); got != hideCanary+" in .env\n" {
				t.Errorf("host .env = %q after the run", got)
			}
		})
	}
}

// The same run without the built-in set (--no-hide) reads the secrets:
// the masking, not the setup, hid them. A --hide pattern still applies.
func TestNoHideDropsOnlyTheBuiltInPatterns(t *testing.T) {
	e := newEnv(t)
	hideWorkspace(e)
	r := e.sh(readAll, "--no-hide", "--hide", "config/*.key")
	if !strings.Contains(r.stdout, ".env cat=["+hideCanary) || !strings.Contains(r.stdout, "certs/server.pem cat=["+hideCanary) {
		t.Errorf("with --no-hide the built-in patterns should not hide: %v", r)
	}
	if !strings.Contains(r.stdout, "config/prod.key cat=[] py=[]") {
		t.Errorf("--hide config/*.key should still hide: %v", r)
	}
	show := e.run("config", "show")
	for _, p := range []string{".env", ".env.*", `"*.pem"`, `"*.key"`, "id_*"} {
		if !strings.Contains(show.stdout, "    - "+p+"\n") {
			t.Errorf("config show should print the built-in pattern %s: %v", p, show)
		}
	}
}

// Bind mode is the host's directory, live: what the agent tries against a
// hidden file, and what the host has after.
func TestAHiddenFileCannotBeReachedReplacedOrMovedOutFromInside(t *testing.T) {
	e := newEnv(t)
	hideWorkspace(e)
	r := e.sh(`
	# A write fails (native: a read-only file) or is lost (docker: the
	# mask is /dev/null); either way the file still reads empty.
	echo agent > .env 2>/dev/null; echo "after write [$(cat .env)]"
	rm -f .env 2>/dev/null && echo "REMOVED .env"
	mv .env moved 2>/dev/null && echo "MOVED .env"
	ln .env hard 2>/dev/null && echo "LINKED .env"
	ln -s "$PWD/.env" abs-link && echo "abs link [$(cat abs-link)]"
	echo "proc [$(cat /proc/self/root$PWD/.env)]"
	# Renaming a directory that holds a hidden file carries the mask along.
	mv svc svc-renamed && echo "renamed [$(cat svc-renamed/.env.production)]"
	# What the agent writes after the start is its own (bind: the host's
	# file system, live): a new .env reads back.
	mkdir -p newdir && echo mine > newdir/.env && echo "new [$(cat newdir/.env)]"
	true`)
	for _, bad := range []string{"REMOVED", "MOVED", "LINKED", hideCanary} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("%s: %v", bad, r)
		}
	}
	for _, want := range []string{"after write []", "abs link []", "proc []", "renamed []", "new [mine]"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q: %v", want, r)
		}
	}
	if got := e.read(".env"); got != hideCanary+" in .env\n" {
		t.Errorf("host .env = %q", got)
	}
	if got := e.read("svc-renamed/.env.production"); got != hideCanary+" in svc/.env.production\n" {
		t.Errorf("the renamed directory's secret on the host = %q", got)
	}
}

// Overlay and copy: what the agent writes over a hidden path is neither
// shown in the diff nor applied; the rest is.
func TestHiddenFilesAreNeverDiffedNorApplied(t *testing.T) {
	for _, mode := range []string{"overlay", "copy"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			hideWorkspace(e)
			name := "hide-" + mode
			r := e.sh(`rm -f .env; echo agent > .env; echo agent > new.pem; mkdir -p deploy/state && echo agent > deploy/state/terraform.tfstate; echo '// changed' >> main.go`,
				"--name", name, "--workspace-mode", mode, "--hide", "deploy/")
			if r.code != 0 {
				t.Fatalf("run: %v", r)
			}
			d := e.run("diff", "--name-only", name)
			if !strings.Contains(d.stdout, "main.go") {
				t.Fatalf("the diff should show main.go: %v", d)
			}
			for _, p := range []string{".env", "new.pem", "deploy"} {
				if strings.Contains(d.stdout, p) {
					t.Errorf("the diff shows hidden %s: %v", p, d)
				}
			}
			if full := e.run("diff", name); strings.Contains(full.stdout, "agent") {
				t.Errorf("the diff's text shows a hidden file's new content: %v", full)
			}
			if a := e.run("apply", "--yes", name); a.code != 0 {
				t.Fatalf("apply: %v", a)
			}
			if got := e.read("main.go"); got != "package main\n// changed\n" {
				t.Errorf("main.go after apply = %q", got)
			}
			if got := e.read(".env"); got != hideCanary+" in .env\n" {
				t.Errorf("apply overwrote the host's .env: %q", got)
			}
			if got := e.read("deploy/state/terraform.tfstate"); got != hideCanary+" in deploy/state/terraform.tfstate\n" {
				t.Errorf("apply overwrote the host's hidden directory: %q", got)
			}
			if _, err := os.Stat(filepath.Join(e.ws, "new.pem")); err == nil {
				t.Error("apply copied a new file a hidden pattern matches to the host")
			}
		})
	}
}

func TestABadHidePatternIsOneLineAndExit125(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"[a-", "../outside", "!keep.pem", "**"} {
		r := e.sh("echo ran", "--hide", p)
		first, _, _ := strings.Cut(strings.TrimSpace(r.stderr), "\n")
		if r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.Contains(first, "filesystem.hide") || !strings.Contains(first, p) {
			t.Errorf("--hide %q: want exit 125 and one line naming it: %v", p, r)
		}
	}
	if ents := e.sandboxDirs(); len(ents) != 0 {
		t.Errorf("a refused run left %v", ents)
	}
}

// An absolute pattern outside the workspace hides a host path (a glob
// too), shown with --ro: what MCP servers' sandboxes use.
func TestAnAbsoluteHidePatternHidesAHostPathOutsideTheWorkspace(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(filepath.Dir(e.ws), "shared")
	os.MkdirAll(dir, 0o755)
	for _, f := range []string{"a.secret", "b.secret", "readme.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(hideCanary+" "+f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Dir(e.ws), 0o755)
	r := e.sh(`cd `+dir+` && for f in a.secret b.secret readme.txt; do echo "$f [$(cat $f)]"; done`, "--ro", dir, "--hide", filepath.Join(dir, "*.secret"))
	if !strings.Contains(r.stdout, "a.secret []") || !strings.Contains(r.stdout, "b.secret []") || !strings.Contains(r.stdout, "readme.txt ["+hideCanary+" readme.txt]") {
		t.Errorf("want the *.secret files empty and readme.txt read: %v", r)
	}
}

// The start's walk is cached by directory in the state dir: a secret the
// host adds between two runs is hidden in the second.
func TestASecretAddedBetweenRunsIsHiddenInTheNext(t *testing.T) {
	e := newEnv(t)
	e.write("svc/app.py", "print('app')\n")
	e.write("svc/deep/er/main.go", "package main\n")
	time.Sleep(100 * time.Millisecond) // settled: the first walk caches them
	if r := e.sh("cat svc/app.py"); r.stdout != "print('app')\n" {
		t.Fatalf("first run: %v", r)
	}
	e.write("svc/deep/er/.env", hideCanary+"\n")
	e.write("svc/new/id_rsa", hideCanary+"\n")
	r := e.sh("cat svc/deep/er/.env svc/new/id_rsa svc/deep/er/main.go")
	if strings.Contains(r.stdout, hideCanary) || !strings.Contains(r.stdout, "package main") {
		t.Errorf("second run: want the new secrets hidden and main.go read: %v", r)
	}
}

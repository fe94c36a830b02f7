package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A trusted .airlock.yaml that the sandbox changes, removes or replaces by
// something else keeps the deny rules of the version the user trusted:
// touching the file must never remove a deny.
func TestTrustFailsClosed(t *testing.T) {
	trusted := "limits: {memory: 5g}\nnetwork:\n  allow_hosts: [repo.com]\n  deny_hosts: [evil.com]\nhostexec: {auto_deny: ['^rm ']}\n"
	for name, tc := range map[string]struct {
		change func(t *testing.T, repo string)
		warn   string
	}{
		"an appended comment keeps the trusted denies": {
			change: func(t *testing.T, repo string) { write(t, repo, trusted+"# hi\n") },
			warn:   "changed since you trusted it",
		},
		"a rewrite without the deny keeps it": {
			change: func(t *testing.T, repo string) { write(t, repo, "network: {allow_hosts: [evil.com]}\n") },
			warn:   "changed since you trusted it",
		},
		"a removed file keeps its denies": {
			change: func(t *testing.T, repo string) { os.Remove(repo) },
			warn:   "is gone",
		},
		"a FIFO in its place keeps them and does not block": {
			change: func(t *testing.T, repo string) {
				os.Remove(repo)
				if err := syscall.Mkfifo(repo, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			warn: "a FIFO",
		},
		"a symbolic link in its place keeps them": {
			change: func(t *testing.T, repo string) {
				other := filepath.Join(filepath.Dir(repo), "other.yaml")
				write(t, other, trusted)
				os.Remove(repo)
				os.Symlink(other, repo)
			},
			warn: "a symbolic link",
		},
		"a directory in its place keeps them": {
			change: func(t *testing.T, repo string) { os.Remove(repo); os.Mkdir(repo, 0o755) },
			warn:   "a directory",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, project, ws := tree(t)
			repo := filepath.Join(project, RepoFileName)
			write(t, repo, trusted)
			if err := Trust(dir, repo, []byte(trusted)); err != nil {
				t.Fatal(err)
			}
			// Positive control: trusted, the whole file applies.
			l, err := Load(Options{Workspace: ws, Dir: dir})
			if err != nil || l.Spec.Limits.MemoryBytes != 5<<30 || !reflect.DeepEqual(l.Spec.Network.AllowHosts, []string{"repo.com"}) {
				t.Fatalf("trusted: %+v, %v; want the whole file", l, err)
			}
			tc.change(t, repo)
			done := make(chan struct{})
			go func() {
				defer close(done)
				l, err = Load(Options{Workspace: ws, Dir: dir})
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Load blocked")
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !reflect.DeepEqual(l.Spec.Network.DenyHosts, []string{"evil.com"}) || !reflect.DeepEqual(l.Spec.HostExec.AutoDeny, []string{"^rm "}) {
				t.Errorf("deny_hosts %q, auto_deny %q: want the trusted version's", l.Spec.Network.DenyHosts, l.Spec.HostExec.AutoDeny)
			}
			if len(l.Spec.Network.AllowHosts) != 0 || l.Spec.Limits.MemoryBytes == 5<<30 {
				t.Errorf("allow_hosts %q, memory %d: want nothing but the denies of the trusted version", l.Spec.Network.AllowHosts, l.Spec.Limits.MemoryBytes)
			}
			if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], tc.warn) || !strings.Contains(l.Warnings[0], "deny rules as last trusted") {
				t.Errorf("warnings %q: want one saying %q and that the trusted denies apply", l.Warnings, tc.warn)
			}
		})
	}
}

// Trust recorded by an older airlock kept no copy of the content: a
// changed file then stops the run, naming what to do, rather than lose
// its denies.
func TestTrustWithoutACopyStopsTheRun(t *testing.T) {
	dir, project, ws := tree(t)
	repo := filepath.Join(project, RepoFileName)
	old := "network: {deny_hosts: [evil.com]}\n"
	write(t, repo, old)
	write(t, trustFile(dir, repo), ContentHash([]byte(old))+" "+repo+"\n")
	if l, err := Load(Options{Workspace: ws, Dir: dir}); err != nil || !reflect.DeepEqual(l.Spec.Network.DenyHosts, []string{"evil.com"}) {
		t.Fatalf("unchanged under an old record: %+v, %v; want it trusted", l, err)
	}
	write(t, repo, old+"# changed\n")
	_, err := Load(Options{Workspace: ws, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "no copy of the version you trusted") || !strings.Contains(err.Error(), "airlock trust "+project) {
		t.Errorf("Load = %v; want the run stopped with the reason", err)
	}
}

// An untrusted FIFO or link named .airlock.yaml is ignored with one line,
// at once.
func TestUntrustedSpecialRepoFileIsIgnored(t *testing.T) {
	dir, project, ws := tree(t)
	repo := filepath.Join(project, RepoFileName)
	if err := syscall.Mkfifo(repo, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Load(Options{Workspace: ws, Dir: dir})
	if err != nil || len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "a FIFO, not a config file; ignored") {
		t.Errorf("Load = %+v, %v; want a one-line warning", l, err)
	}
}

func TestReadRegular(t *testing.T) {
	d := t.TempDir()
	file := filepath.Join(d, "f")
	write(t, file, "hello")
	fifo := filepath.Join(d, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	link := filepath.Join(d, "link")
	os.Symlink(file, link)
	for name, tc := range map[string]struct {
		path string
		max  int64
		want error
	}{
		"a regular file is read":          {path: file, max: 5},
		"a FIFO is refused without block": {path: fifo, max: 5, want: ErrNotRegular},
		"a link is refused":               {path: link, max: 5, want: ErrNotRegular},
		"a directory is refused":          {path: d, max: 5, want: ErrNotRegular},
		"a missing file is not exist":     {path: filepath.Join(d, "no"), max: 5, want: os.ErrNotExist},
		"/dev/zero is refused":            {path: "/dev/zero", max: 5, want: ErrNotRegular},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := ReadRegular(tc.path, tc.max)
			if tc.want == nil && (err != nil || string(b) != "hello") {
				t.Errorf("ReadRegular(%s) = %q, %v", tc.path, b, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("ReadRegular(%s) = %v, want %v", tc.path, err, tc.want)
			}
		})
	}
	if _, err := ReadRegular(file, 4); err == nil || !strings.Contains(err.Error(), "larger than 4 bytes") {
		t.Errorf("ReadRegular of a larger file = %v, want an error", err)
	}
}

// The project is found where the sandbox cannot change it: a .git made in
// a workspace that is a repository's subdirectory does not turn the next
// run into another project, so the repository's project file still holds.
func TestProjectCannotBeRehomed(t *testing.T) {
	dir, project, ws := tree(t)
	write(t, ProjectFile(dir, project), "network: {deny_hosts: [evil.com]}\n")
	l, err := Load(Options{Workspace: ws, Dir: dir})
	if err != nil || l.Project != project || !reflect.DeepEqual(l.Spec.Network.DenyHosts, []string{"evil.com"}) {
		t.Fatalf("first use: %+v, %v; want the repository's project and its deny", l, err)
	}
	// What a sandbox in ws can do: make a .git of any kind there.
	for _, plant := range []func(){
		func() { os.Mkdir(filepath.Join(ws, ".git"), 0o755) },
		func() {
			os.RemoveAll(filepath.Join(ws, ".git"))
			write(t, filepath.Join(ws, ".git"), "gitdir: /tmp/x\n")
		},
	} {
		plant()
		l, err = Load(Options{Workspace: ws, Dir: dir})
		if err != nil || l.Project != project || !reflect.DeepEqual(l.Spec.Network.DenyHosts, []string{"evil.com"}) {
			t.Errorf("after a planted .git: project %q, deny_hosts %q, %v; want %s and evil.com", l.Project, l.Spec.Network.DenyHosts, err, project)
		}
	}
	// Positive control: a repository first used as such is its own project.
	nested := filepath.Join(project, "nested")
	os.MkdirAll(filepath.Join(nested, ".git"), 0o755)
	if got := ProjectOf(dir, nested); got != nested {
		t.Errorf("ProjectOf(%s) = %s, want the nested repository itself", nested, got)
	}
	if got := ProjectOf(dir, ws); got != project {
		t.Errorf("ProjectOf(%s) = %s after other workspaces, want %s", ws, got, project)
	}
}

// Files a config names that airlock reads to decide what a sandbox may do
// must be where no sandbox writes: a trusted .airlock.yaml naming a
// decisions file by a relative path names the sandbox's own file.
func TestReadFilesOutOfTheSandboxsReach(t *testing.T) {
	dir, project, ws := tree(t)
	outside := filepath.Join(dir, "decisions.yaml")
	write(t, outside, "version: 1\n")
	for name, tc := range map[string]struct {
		text, want string // want: "" accepted, else in the error
	}{
		"a relative decisions file is the sandbox's":         {"approvals: {mode: ask, decisions: .airlock/decisions.yaml}\n", "approvals.decisions: " + filepath.Join(project, ".airlock/decisions.yaml") + " is inside"},
		"an absolute one in the workspace is too":            {"approvals: {decisions: " + filepath.Join(ws, "d.yaml") + "}\n", "is inside " + ws},
		"a relative upstream CA is the sandbox's":            {"network: {upstream_ca: ca.pem}\n", "network.upstream_ca: " + filepath.Join(project, "ca.pem") + " is inside"},
		"a decisions file in the config dir is fine":         {"approvals: {decisions: " + outside + "}\n", ""},
		"a link out of the workspace is still the sandbox's": {"approvals: {decisions: " + filepath.Join(project, "link.yaml") + "}\n", "is inside " + project},
	} {
		t.Run(name, func(t *testing.T) {
			os.Symlink(outside, filepath.Join(project, "link.yaml"))
			repo := filepath.Join(project, RepoFileName)
			write(t, repo, tc.text)
			if err := Trust(dir, repo, []byte(tc.text)); err != nil {
				t.Fatal(err)
			}
			l, err := Load(Options{Workspace: ws, Dir: dir})
			if tc.want == "" && err != nil {
				t.Errorf("Load = %v, want accepted", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), RepoFileName+":1")) {
				t.Errorf("Load = %+v, %v; want an error naming the rule and containing %q", l, err, tc.want)
			}
		})
	}
	// A flag naming one is the user's own choice, made now: a warning.
	flags := NewLayer(SourceFlag, "")
	flags.SetFlag("approvals.decisions", "--decisions", []string{filepath.Join(ws, "d.yaml")})
	os.Remove(filepath.Join(project, RepoFileName))
	l, err := Load(Options{Workspace: ws, Dir: dir, Flags: flags})
	if err != nil || len(l.Warnings) == 0 || !strings.Contains(l.Warnings[len(l.Warnings)-1], "flag --decisions") {
		t.Errorf("Load with --decisions in the workspace = %+v, %v; want a warning", l, err)
	}
}

// A project inside another repository (a nested clone, or a .git a
// sandbox made before the workspace was first used) keeps the enclosing
// repository's denies, from its project file and its trusted
// .airlock.yaml; never its allows.
func TestEnclosingRepositoriesDeniesHold(t *testing.T) {
	dir, project, ws := tree(t)
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755) // first use sees a repository of its own
	write(t, ProjectFile(dir, project), "network: {deny_hosts: [evil.com], allow_hosts: [wide.com]}\n")
	repo := filepath.Join(project, RepoFileName)
	text := "network: {deny_hosts: [evil2.com], allow_hosts: [wide2.com]}\nhostexec: {auto_deny: ['^rm ']}\n"
	write(t, repo, text)
	Trust(dir, repo, []byte(text))
	l, err := Load(Options{Workspace: ws, Dir: dir})
	if err != nil || l.Project != ws {
		t.Fatalf("Load = %+v, %v; want the nested repository as the project", l, err)
	}
	if !reflect.DeepEqual(l.Spec.Network.DenyHosts, []string{"evil.com", "evil2.com"}) || !reflect.DeepEqual(l.Spec.HostExec.AutoDeny, []string{"^rm "}) {
		t.Errorf("deny_hosts %q, auto_deny %q: want the enclosing repository's", l.Spec.Network.DenyHosts, l.Spec.HostExec.AutoDeny)
	}
	if len(l.Spec.Network.AllowHosts) != 0 {
		t.Errorf("allow_hosts %q: an enclosing repository's allows do not carry", l.Spec.Network.AllowHosts)
	}
	// Positive control: the enclosing repository's own runs get all of it.
	l, _ = Load(Options{Workspace: project, Dir: dir})
	if !reflect.DeepEqual(l.Spec.Network.AllowHosts, []string{"wide.com", "wide2.com"}) {
		t.Errorf("the enclosing repository's own allow_hosts = %q", l.Spec.Network.AllowHosts)
	}
}

package config

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tree makes a config dir and a git project with a workspace inside it.
func tree(t *testing.T) (dir, project, ws string) {
	t.Helper()
	root := t.TempDir()
	dir, project = filepath.Join(root, "cfg", "airlock"), filepath.Join(root, "proj")
	ws = filepath.Join(project, "sub")
	os.MkdirAll(filepath.Join(project, ".git"), 0o755)
	os.MkdirAll(ws, 0o755)
	return dir, project, ws
}

func write(t *testing.T, path, text string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadLayers(t *testing.T) {
	dir, project, ws := tree(t)
	write(t, GlobalFile(dir), "network:\n  allow_hosts: [global.com]\n  deny_hosts: [evil.com]\nlimits: {memory: 2g}\n")
	write(t, ProjectFile(dir, project), "version: 1\nproject: "+project+"\nlimits: {memory: 3g}\nnetwork: {allow_hosts: [project.com]}\n")
	repo := filepath.Join(project, RepoFileName)
	write(t, repo, "limits: {memory: 5g}\nnetwork: {allow_hosts: [repo.com]}\n")
	flags := NewLayer(SourceFlag, "")
	flags.SetFlag("network.allow_hosts", "--allow-host", []string{"flag.com"})

	// Untrusted: ignored, with a warning saying how to trust it.
	l, err := Load(Options{Workspace: ws, Dir: dir, Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	if l.Project != project {
		t.Errorf("Project = %q, want the git root %q", l.Project, project)
	}
	if want := []string{"global.com", "project.com", "flag.com"}; !reflect.DeepEqual(l.Spec.Network.AllowHosts, want) {
		t.Errorf("allow_hosts = %q, want %q", l.Spec.Network.AllowHosts, want)
	}
	if l.Spec.Limits.MemoryBytes != 3<<30 || l.Spec.Workspace.Path != ws {
		t.Errorf("spec = %+v, want memory 3g from the project file and the workspace path", l.Spec)
	}
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "not trusted") || !strings.Contains(l.Warnings[0], "airlock trust "+project) {
		t.Errorf("warnings = %q, want one saying how to trust %s", l.Warnings, repo)
	}

	// Trusted: used.
	data, _ := os.ReadFile(repo)
	if err := Trust(dir, repo, data); err != nil {
		t.Fatal(err)
	}
	l, _ = Load(Options{Workspace: ws, Dir: dir, Flags: flags})
	if l.Spec.Limits.MemoryBytes != 5<<30 || len(l.Warnings) != 0 || len(l.Files) != 3 {
		t.Errorf("trusted: memory %d, warnings %q, files %q; want 5g from .airlock.yaml, no warning, 3 files", l.Spec.Limits.MemoryBytes, l.Warnings, l.Files)
	}
	if want := []string{"evil.com"}; !reflect.DeepEqual(l.Spec.Network.DenyHosts, want) {
		t.Errorf("deny_hosts = %q, want the global file's %q", l.Spec.Network.DenyHosts, want)
	}

	// Changed since: ignored again.
	write(t, repo, "limits: {memory: 9g}\n")
	l, _ = Load(Options{Workspace: ws, Dir: dir})
	if l.Spec.Limits.MemoryBytes != 3<<30 || len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "changed since you trusted it") {
		t.Errorf("changed: memory %d, warnings %q", l.Spec.Limits.MemoryBytes, l.Warnings)
	}

	// Revoked.
	if ok, err := Revoke(dir, repo); !ok || err != nil {
		t.Errorf("Revoke = %v, %v", ok, err)
	}
	if st := CheckTrust(dir, repo, data); st != Untrusted {
		t.Errorf("after Revoke: %v, want Untrusted", st)
	}
}

func TestLoadBadFileFails(t *testing.T) {
	dir, _, ws := tree(t)
	write(t, GlobalFile(dir), "version: 1\nnetwork:\n  allow_host: [x.com]\n")
	_, err := Load(Options{Workspace: ws, Dir: dir})
	if want := GlobalFile(dir) + ":3: network.allow_host: unknown key (did you mean allow_hosts?)"; err == nil || err.Error() != want {
		t.Errorf("Load = %v, want %q", err, want)
	}
}

// A user without a config dir (uid 65534 with HOME=/nonexistent) gets the
// defaults, no error.
func TestLoadWithoutConfigDir(t *testing.T) {
	ws := t.TempDir()
	t.Setenv("HOME", "/nonexistent")
	t.Setenv("XDG_CONFIG_HOME", "")
	l, err := Load(Options{Workspace: ws})
	if err != nil || l.Spec.Limits.Pids != DefaultPids || len(l.Files) != 0 {
		t.Errorf("Load without a config dir = %+v, %v; want the defaults", l, err)
	}
	os.Unsetenv("HOME")
	l, err = Load(Options{Workspace: ws})
	if err != nil || l.Dir != "" {
		t.Errorf("Load without HOME = %+v, %v; want the defaults", l, err)
	}
	write(t, filepath.Join(ws, RepoFileName), "limits: {memory: 9g}\n")
	l, _ = Load(Options{Workspace: ws})
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "no config directory") {
		t.Errorf("warnings = %q, want one saying trust cannot be recorded", l.Warnings)
	}
}

func TestDirHonoursXDG(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/x/cfg")
	if d, err := Dir(); err != nil || d != "/x/cfg/airlock" {
		t.Errorf("Dir() = %q, %v; want /x/cfg/airlock", d, err)
	}
}

func TestProjectDir(t *testing.T) {
	_, project, ws := tree(t)
	if got := ProjectDir(ws); got != project {
		t.Errorf("ProjectDir(%s) = %s, want the git root %s", ws, got, project)
	}
	plain := t.TempDir()
	if got := ProjectDir(plain); got != plain && !strings.HasPrefix(plain, got) {
		t.Errorf("ProjectDir(%s) = %s, want the workspace", plain, got)
	}
	if a, b := ProjectFile("/d", "/p/one"), ProjectFile("/d", "/p/two"); a == b || !strings.HasPrefix(a, "/d/projects/") {
		t.Errorf("ProjectFile = %s, %s; want distinct files under /d/projects", a, b)
	}
}

func TestTemplateParses(t *testing.T) {
	l, err := Parse("/p/x.yaml", ProjectTemplate("/p"), SourceProject)
	if err != nil {
		t.Fatal(err)
	}
	// Uncommented, every example in it parses too.
	var b strings.Builder
	for _, line := range strings.Split(string(ProjectTemplate("/p")), "\n") {
		if rest, ok := strings.CutPrefix(line, "# "); ok && (strings.HasPrefix(rest, " ") || strings.Contains(rest, ":") && !strings.Contains(rest, "airlock")) {
			line = rest
		}
		b.WriteString(line + "\n")
	}
	if _, err := Parse("/p/x.yaml", []byte(b.String()), SourceProject); err != nil {
		t.Errorf("the template, uncommented: %v\n%s", err, b.String())
	}
	_ = l
}

func TestShowRoundTrips(t *testing.T) {
	l, err := Parse("/etc/proj/config.yaml", []byte(fullFile), SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	s, or := Merge(Defaults(), l)
	var out bytes.Buffer
	if err := Show(&out, s, or); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  memory: 2g  # /etc/proj/config.yaml:10\n") {
		t.Errorf("Show with origins lacks memory's origin:\n%s", out.String())
	}
	back, err := Parse("/etc/proj/config.yaml", out.Bytes(), SourceGlobal)
	if err != nil {
		t.Fatalf("Show's output does not parse: %v\n%s", err, out.String())
	}
	s2, _ := Merge(back)
	if !reflect.DeepEqual(s, s2) {
		t.Errorf("Show's output reads back as\n%+v\nwant\n%+v", s2, s)
	}
}

func TestTunnelHostsAreReadAndCheckedAgainstSecretsAndEndpoints(t *testing.T) {
	dir, _, ws := tree(t)
	write(t, GlobalFile(dir), "network:\n  allow_hosts: [a.com, {host: dl.a.com, intercept: false}, {host: b.com, intercept: true}]\n  tunnel_hosts: [\"*.cdn.test\"]\n")
	l, err := Load(Options{Workspace: ws, Dir: dir, Flags: NewLayer(SourceFlag, "")})
	if err != nil {
		t.Fatal(err)
	}
	n := l.Spec.Network
	if !reflect.DeepEqual(n.AllowHosts, []string{"a.com", "b.com"}) || !reflect.DeepEqual(n.TunnelHosts, []string{"dl.a.com", "*.cdn.test"}) {
		t.Errorf("allow %q, tunnel %q", n.AllowHosts, n.TunnelHosts)
	}
	for name, c := range map[string]struct{ file, want string }{
		"a secret toward a tunnelled host": {"network: {allow_hosts: [{host: api.x.com, intercept: false}]}\nsecrets: [\"TOKEN@*.x.com\"]\n",
			"secret TOKEN goes to *.x.com: a tunnel cannot swap secrets in"},
		"an endpoint rule on a tunnelled host": {"network: {tunnel_hosts: [api.x.com], endpoints: [\"api.x.com GET /*\"]}\n",
			"a blind tunnel (intercept: false) cannot see requests"},
		"an unknown key in an entry": {"network: {allow_hosts: [{host: a.com, intercep: false}]}\n", "allow_hosts.intercep: unknown key"},
		"an address as a tunnel":     {"network: {allow_hosts: [{host: 10.0.0.1, intercept: false}]}\n", "takes a name or *.name"},
	} {
		t.Run(name, func(t *testing.T) {
			write(t, GlobalFile(dir), c.file)
			_, err := Load(Options{Workspace: ws, Dir: dir, Flags: NewLayer(SourceFlag, "")})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Load = %v, want an error saying %q", err, c.want)
			}
		})
	}
}

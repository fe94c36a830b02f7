//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
)

// writeConfig writes the global config file of e's user.
func (e *env) writeConfig(text string) string {
	e.t.Helper()
	p := filepath.Join(e.home, ".config", "airlock", "config.yaml")
	os.MkdirAll(filepath.Dir(p), 0o700)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func TestConfigFileReachesTheSandbox(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("version: 1\nenv: [FROM_CONFIG=global, OVERRIDDEN=global]\nlimits:\n  pids: 77\n")
	// A flag the user set wins over the file; one left at its default does not.
	r := e.sh(`echo "$FROM_CONFIG $OVERRIDDEN"`, "-e", "OVERRIDDEN=flag")
	if r.code != 0 || !strings.Contains(r.stdout, "global flag") {
		t.Fatalf("run with a config file = %v, want env from the file and the flag", r)
	}
	if r := e.run("run", "-d", "--name", "cfg", "--cpus", "1"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	var rec struct {
		Config struct {
			Config struct {
				Limits struct {
					Pids int64
					CPUs float64
				}
			}
		}
	}
	if r := e.run("get", "cfg"); json.Unmarshal([]byte(r.stdout), &rec) != nil || rec.Config.Config.Limits.Pids != 77 || rec.Config.Config.Limits.CPUs != 1 {
		t.Errorf("limits = %+v, want pids 77 from the file and cpus 1 from the flag", rec.Config.Config.Limits)
	}
}

func TestConfigBadFileStopsTheRun(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("version: 1\nnetwork:\n  allow_host: [example.com]\n")
	r := e.run("run", "--name", "never", "--", "touch", "started")
	want := "airlock: ~/.config/airlock/config.yaml:3: network.allow_host: unknown key (did you mean allow_hosts?)\n"
	if r.code != 125 || r.stderr != want {
		t.Errorf("run with a typo in the config = %v, want exit 125 and exactly %q", r, want)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "started")); err == nil {
		t.Error("the command ran despite the bad config")
	}
	if ls := e.run("ls", "-q"); strings.TrimSpace(ls.stdout) != "" {
		t.Errorf("a sandbox was registered: %q", ls.stdout)
	}
	for text, want := range map[string]string{
		"limits: {memory: lots}\n":  `limits.memory: "lots": use a size`,
		"backend: vmware\n":         `backend: unknown value "vmware": use native, docker, vm or kubernetes`,
		"workspace:\n  mode: [x]\n": "workspace.mode: use bind, overlay or copy",
		"network: [\n":              "syntax error",
	} {
		e.writeConfig(text)
		if r := e.run("run", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("run with config %q = %v, want exit 125 and one line with %q", text, r, want)
		}
	}
}

func TestConfigUntrustedRepoFileIsIgnored(t *testing.T) {
	e := newEnv(t)
	os.WriteFile(filepath.Join(e.ws, ".airlock.yaml"), []byte("env: [FROM_REPO=yes]\n"), 0o644)
	r := e.run("run", "--", "sh", "-c", `echo "repo=$FROM_REPO"`)
	if r.code != 0 || !strings.Contains(r.stdout, "repo=\n") || !strings.Contains(r.stderr, "is not trusted, so it was ignored") || !strings.Contains(r.stderr, "airlock trust "+e.ws) {
		t.Fatalf("untrusted .airlock.yaml: %v, want it ignored with a warning naming airlock trust", r)
	}
	if r := e.run("trust"); r.code != 0 || !strings.Contains(r.stdout, "FROM_REPO=yes") {
		t.Fatalf("airlock trust = %v, want the file shown and trusted", r)
	}
	if r := e.run("run", "--", "sh", "-c", `echo "repo=$FROM_REPO"`); r.code != 0 || !strings.Contains(r.stdout, "repo=yes") || strings.Contains(r.stderr, "warning") {
		t.Fatalf("trusted .airlock.yaml: %v, want it used", r)
	}
	// The sandbox changes it: ignored again, and flagged by the audit.
	r = e.run("run", "--", "sh", "-c", `echo "env: [FROM_REPO=evil]" > .airlock.yaml`)
	if r.code != 0 || !strings.Contains(r.stderr, ".airlock.yaml") {
		t.Logf("run that changed .airlock.yaml: %v", r)
	}
	if r := e.run("run", "--", "sh", "-c", `echo "repo=$FROM_REPO"`); !strings.Contains(r.stdout, "repo=\n") || !strings.Contains(r.stderr, "changed since you trusted it") {
		t.Fatalf("changed .airlock.yaml: %v, want it ignored with a warning", r)
	}
	if r := e.run("trust", "--revoke"); r.code != 0 || !strings.Contains(r.stdout, "no longer trusted") {
		t.Errorf("trust --revoke = %v", r)
	}
	os.Remove(filepath.Join(e.ws, ".airlock.yaml"))
	if r := e.run("trust"); r.code != 125 || !strings.Contains(r.stderr, "nothing to trust") {
		t.Errorf("trust without a file = %v, want exit 125", r)
	}
}

func TestConfigShow(t *testing.T) {
	e := newEnv(t)
	p := e.writeConfig("limits:\n  memory: 2g\nnetwork:\n  deny_hosts: [gist.github.com]\n")
	r := e.run("config", "show", "--origin")
	if r.code != 0 || !strings.Contains(r.stdout, "memory: 2g  # ") || !strings.Contains(r.stdout, "config.yaml:2") || !strings.Contains(r.stdout, "pids: 1024  # default") {
		t.Fatalf("config show --origin = %v", r)
	}
	r = e.run("config", "show", "--json", "--origin")
	var out struct {
		Spec    config.Spec
		Origins map[string][]string
		Files   []string
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("config show --json: %v\n%s", err, r.stdout)
	}
	if out.Spec.Limits.MemoryBytes != 2<<30 || len(out.Files) != 1 || out.Files[0] != p || !strings.HasSuffix(out.Origins["network.deny_hosts"][0], ":4") {
		t.Errorf("config show --json = %+v", out)
	}
}

func TestConfigEdit(t *testing.T) {
	e := newEnv(t)
	c := e.cmd("config", "edit")
	c.Env = append(c.Env, "VISUAL=", `EDITOR=sh -c 'printf "limits:\n  cpus: 2\n" >> "$0"'`)
	if r := e.runCmd(c); r.code != 0 {
		t.Fatalf("config edit = %v", r)
	}
	r := e.run("config", "show", "--origin")
	if !strings.Contains(r.stdout, "cpus: 2  # ") || !strings.Contains(r.stdout, "projects/") {
		t.Errorf("after config edit: %v, want cpus from the project file", r)
	}
	c = e.cmd("config", "edit")
	c.Env = append(c.Env, "EDITOR=sed -i s/cpus:/cpu:/")
	if r := e.runCmd(c); r.code != 125 || !strings.Contains(r.stderr, "limits.cpu: unknown key (did you mean cpus?)") {
		t.Errorf("config edit leaving a typo = %v, want exit 125 naming it", r)
	}
}

// Without a config dir (HOME=/nonexistent, as uid 65534 often has) a run
// works, with the defaults.
func TestConfigWithoutConfigDir(t *testing.T) {
	e := newEnv(t)
	c := e.cmd("run", "--", "true")
	c.Env = append(c.Env, "HOME=/nonexistent")
	if r := e.runCmd(c); r.code != 0 {
		t.Errorf("run with HOME=/nonexistent = %v, want exit 0", r)
	}
	c = e.cmd("config", "show")
	c.Env = append(c.Env, "HOME=/nonexistent")
	if r := e.runCmd(c); r.code != 0 || !strings.Contains(r.stdout, "pids: 1024") {
		t.Errorf("config show with HOME=/nonexistent = %v", r)
	}
}

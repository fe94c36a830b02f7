package sandbox

import (
	"encoding/json"
	"errors"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPlanRefusesWhatDoesNotExist(t *testing.T) {
	for name, c := range map[string]string{
		"an unknown mount type":           `{"vfs":{"mounts":{"/s3":{"type":"s3"}}}}`,
		"a mount without a type":          `{"vfs":{"mounts":{"/a":{}}}}`,
		"an overlay off the workspace":    `{"vfs":{"mounts":{"/workspace":{"type":"memory"},"/o":{"type":"overlay","lower":{"type":"real_fs","host_path":"/usr"}}}}}`,
		"a mount over the system":         `{"vfs":{"mounts":{"/proc/x":{"type":"memory"}}}}`,
		"a relative path":                 `{"vfs":{"direct_mounts":{"x":{"host_path":"/usr"}}}}`,
		"a missing host path":             `{"vfs":{"direct_mounts":{"/x":{"host_path":"/nonexistent/y"}}}}`,
		"a policy script":                 `{"network":{"policy_script":"x"}}`,
		"a docker image":                  `{"image":"python:3.12"}`,
		"negative memory":                 `{"resources":{"memory_mb":-1}}`,
		"a bad env name":                  `{"env":{"1X":"y"}}`,
		"a secret without hosts":          `{"network":{"secrets":{"K":{"value":"abcdefgh"}}}}`,
		"a read-only workspace":           `{"vfs":{"mounts":{"/workspace":{"type":"real_fs","host_path":"/usr","readonly":true}}}}`,
		"the same path twice (two kinds)": `{"vfs":{"mounts":{"/d":{"type":"memory"}},"direct_mounts":{"/d":{"host_path":"/usr"}}}}`,
		"a hidden host path":              `{"vfs":{"direct_mounts":{"/d":{"host_path":"/etc/ssl/private"}}}}`,
	} {
		var c2 Config
		if err := json.Unmarshal([]byte(c), &c2); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err := plan(&c2)
		if !errors.Is(err, &Error{Kind: KindInvalidConfig}) {
			t.Errorf("%s: plan(%s) = %v, want an invalid_config error", name, c, err)
		}
	}
}

func TestPlanMapsTunnelHostsAndRefusesThemAsConfigDoes(t *testing.T) {
	var c Config
	json.Unmarshal([]byte(`{"network":{"allowed_hosts":["a.test"],"tunnel_hosts":["dl.test","*.cdn.test","raw.test:8443"]}}`), &c)
	p, err := plan(&c)
	if err != nil {
		t.Fatal(err)
	}
	if n := p.spec.Config.Network; !slices.Equal(n.TunnelHosts, []string{"dl.test", "*.cdn.test", "raw.test:8443"}) || !slices.Equal(n.AllowHosts, []string{"a.test"}) {
		t.Fatalf("network = %+v", n)
	}
	for name, c := range map[string]struct{ config, want string }{
		"a secret toward a tunnel host": {`{"network":{"tunnel_hosts":["api.x.test"],"secrets":{"TOKEN":{"value":"abcdefgh","hosts":["*.x.test"]}}}}`,
			"network.tunnel_hosts: api.x.test is a blind tunnel (intercept: false), but secret TOKEN goes to *.x.test: a tunnel cannot swap secrets in; intercept the host or drop the secret"},
		"a host both intercepted and tunnelled": {`{"network":{"allowed_hosts":["x.test"],"tunnel_hosts":["x.test"]}}`,
			"network: x.test is in allow_hosts both intercepted and with intercept: false; keep one"},
		"an address as a tunnel": {`{"network":{"tunnel_hosts":["10.0.0.1"]}}`, "takes a name or *.name"},
	} {
		t.Run(name, func(t *testing.T) {
			var cfg Config
			if err := json.Unmarshal([]byte(c.config), &cfg); err != nil {
				t.Fatal(err)
			}
			_, err := plan(&cfg)
			if !errors.Is(err, &Error{Kind: KindInvalidConfig}) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("plan = %v, want an invalid_config error saying %q", err, c.want)
			}
		})
	}
}

func TestPlanMapsMounts(t *testing.T) {
	var c Config
	json.Unmarshal([]byte(`{"vfs":{"mounts":{"/workspace":{"type":"overlay","upper":{"type":"memory"},"lower":{"type":"real_fs","host_path":"/usr/share"}},
		"/config":{"type":"real_fs","host_path":"/etc","readonly":true}},"direct_mounts":{"/mnt/data":{"host_path":"/usr/lib","readonly":true}}}}`), &c)
	p, err := plan(&c)
	if err != nil {
		t.Fatal(err)
	}
	ws := p.spec.Config.Workspace
	if p.workspace != "/workspace" || ws.Path != "/usr/share" || ws.Mode != "overlay" || len(p.spec.Binds) != 2 {
		t.Fatalf("plan = workspace %q source %+v binds %+v", p.workspace, ws, p.spec.Binds)
	}
	for _, b := range p.spec.Binds {
		if !b.ReadOnly {
			t.Errorf("bind %+v should be read-only", b)
		}
	}
}

// FuzzPlan: no config a client can send panics the planner.
func FuzzPlan(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"image":"standard","resources":{"cpus":2,"memory_mb":1024,"timeout_seconds":300},"network":{"allowed_hosts":["api.openai.com"],"secrets":{"K":{"value":"sk-12345678","hosts":["api.openai.com"]}}},"vfs":{"mounts":{"/workspace":{"type":"memory"}}},"env":{"K":"${K}"}}`,
		`{"vfs":{"mounts":{"/workspace":{"type":"overlay","upper":{"type":"memory"},"lower":{"type":"real_fs","host_path":"/usr"}}}}}`,
		`{"network":{"allowed_hosts":["a.test"],"tunnel_hosts":["*.x.test","y.test:8443"],"secrets":{"K":{"value":"abcdefgh","hosts":["b.x.test"]}}}}`,
		`{"vfs":{"direct_mounts":{"/workspace":{"host_path":"/tmp"}}}}`,
		`{"vfs":{"direct_mounts":{"/hostetc":{"host_path":"/etc","readonly":true},"/r":{"host_path":"/"}}}}`,
		`{"vfs":{"mounts":{"/workspace":{"type":"real_fs","host_path":"/etc"}},"direct_mounts":{"/v":{"host_path":"/var/run"}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Config
		if json.Unmarshal(b, &c) != nil {
			return
		}
		if p, err := plan(&c); err == nil {
			checkHideInvariants(t, p)
		}
	})
}

// checkHideInvariants: whatever mounts a plan accepted, no host source is or
// lies inside a hidden path, every hidden path inside a source is hidden at
// its place under the target, and targets are clean, distinct and off the
// system's directories.
func checkHideInvariants(t *testing.T, p *planned) {
	t.Helper()
	hidden := p.hidden()
	type pair struct{ src, dst string }
	var pairs []pair
	targets := map[string]bool{}
	for _, b := range p.spec.Binds {
		if b.Source != "" {
			pairs = append(pairs, pair{b.Source, b.Target})
		}
		if targets[b.Target] {
			t.Errorf("target %s mounted twice", b.Target)
		}
		targets[b.Target] = true
		if !path.IsAbs(b.Target) || path.Clean(b.Target) != b.Target || b.Target == "/" {
			t.Errorf("target %q is not a clean absolute path other than /", b.Target)
		}
		for _, sys := range []string{"/proc", "/dev", "/sys", "/etc", "/usr", "/run/airlock"} {
			if b.Target == sys || strings.HasPrefix(b.Target, sys+"/") {
				t.Errorf("target %s is over the system's %s", b.Target, sys)
			}
		}
	}
	if src := p.spec.Config.Workspace.Path; src != "" && src != p.workspace {
		pairs = append(pairs, pair{src, p.workspace})
	}
	for _, m := range pairs {
		for _, h := range hidden {
			h = filepath.Clean(h)
			switch {
			case m.src == h || strings.HasPrefix(m.src, h+"/"):
				t.Errorf("source %s is (inside) the hidden %s", m.src, h)
			case strings.HasPrefix(h, m.src+"/"):
				if want := path.Join(m.dst, strings.TrimPrefix(h, m.src)); !slices.Contains(p.spec.Hide, want) {
					t.Errorf("hidden %s is inside %s, mounted at %s, but %s is not hidden", h, m.src, m.dst, want)
				}
			}
		}
	}
}

func TestPlanHidesHiddenPathsUnderABindsTarget(t *testing.T) {
	var c Config
	json.Unmarshal([]byte(`{"vfs":{"direct_mounts":{"/hostetc":{"host_path":"/etc","readonly":true}}}}`), &c)
	p, err := plan(&c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.spec.Hide, "/hostetc/shadow") {
		t.Fatalf("Hide = %v, want /hostetc/shadow among them", p.spec.Hide)
	}
}

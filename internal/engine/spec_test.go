package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
)

func TestSpecCompleteAndValidate(t *testing.T) {
	t.Run("defaults are made once, for what is unset", func(t *testing.T) {
		var s Spec
		s.Config.Backend = config.BackendDocker
		s.Complete()
		c := s.Config
		if c.Limits.MemoryBytes != backend.TotalMemory()/2 || c.Limits.TmpBytes != c.Limits.MemoryBytes || c.Image != config.DefaultImage {
			t.Fatalf("completed limits %+v, image %q", c.Limits, c.Image)
		}
		s.Config.Limits = config.Limits{MemoryBytes: 1 << 30, TmpBytes: 64 << 20}
		s.Config.Image = "x:1"
		s.Complete()
		if c := s.Config; c.Limits.MemoryBytes != 1<<30 || c.Limits.TmpBytes != 64<<20 || c.Image != "x:1" {
			t.Fatalf("Complete changed set values: %+v %q", c.Limits, c.Image)
		}
		var n Spec
		n.Complete()
		if n.Config.Image != "" {
			t.Fatalf("a native spec got image %q", n.Config.Image)
		}
	})
	where := func(key string) string { return key + " (f.yaml:3)" }
	for name, tt := range map[string]struct {
		set  func(c *config.Spec)
		key  string
		want string
	}{
		"an unknown backend":             {func(c *config.Spec) { c.Backend = "vmware" }, "backend", `backend (f.yaml:3) "vmware": use native, docker, vm or kubernetes`},
		"an image without docker":        {func(c *config.Spec) { c.Image = "x" }, "image", "image (f.yaml:3) needs --backend docker"},
		"an unknown workspace mode":      {func(c *config.Spec) { c.Workspace.Mode = "fuse" }, "workspace.mode", `--workspace-mode "fuse": use bind, overlay or copy`},
		"auto apply in bind mode":        {func(c *config.Spec) { c.Workspace.AutoApply = true }, "workspace.auto_apply", "workspace.auto_apply (f.yaml:3) needs --workspace-mode overlay or copy"},
		"apply risky without auto apply": {func(c *config.Spec) { c.Workspace.ApplyRisky = true }, "workspace.apply_risky", "goes with --auto-apply"},
		"decisions without ask":          {func(c *config.Spec) { c.Approvals.Decisions = "/d.yaml" }, "approvals.decisions", "approvals.decisions (f.yaml:3) goes with --ask"},
		"a port out of range":            {func(c *config.Spec) { c.Ports = []string{"8000:99999"} }, "ports", `ports (f.yaml:3) "8000:99999": the sandbox's port 99999 is not a port`},
		"two ports on one host address":  {func(c *config.Spec) { c.Ports = []string{"9000:80", "127.0.0.1:9000:81"} }, "ports", "both publish on 127.0.0.1:9000"},
	} {
		t.Run(name+" is refused, naming the setting and its origin", func(t *testing.T) {
			var s Spec
			tt.set(&s.Config)
			err := s.Validate(where)
			var se *SettingError
			if !errors.As(err, &se) || se.Key != tt.key || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want a %s error containing %q", err, tt.key, tt.want)
			}
		})
	}
	t.Run("a spec that hangs together passes and its mode is normalized", func(t *testing.T) {
		var s Spec
		s.Config.Backend = config.BackendDocker
		s.Config.Image = "x:1"
		s.Config.Workspace = config.Workspace{AutoApply: true, ApplyRisky: true, Mode: config.WorkspaceCopy}
		s.Config.Approvals = config.Approvals{Mode: config.ApprovalsAsk, Decisions: "/d.yaml"}
		if err := s.Validate(nil); err != nil {
			t.Fatal(err)
		}
		var b Spec
		if err := b.Validate(nil); err != nil || b.Config.Workspace.Mode != config.WorkspaceBind {
			t.Fatalf("an empty spec: %v, mode %q", err, b.Config.Workspace.Mode)
		}
	})
	t.Run("without where, an error names the key", func(t *testing.T) {
		s := Spec{Config: config.Spec{Image: "x"}}
		if err := s.Validate(nil); err == nil || err.Error() != "image needs --backend docker or kubernetes" {
			t.Fatalf("Validate(nil) = %v", err)
		}
	})
}

func TestPublishedCountsAnEntryGivenTwiceOnce(t *testing.T) {
	s := Spec{Config: config.Spec{Ports: []string{"8000:80", "127.0.0.1:8000:80/tcp", "3000", "3000"}}}
	ps, err := s.Published()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	// Two SANDBOX_PORT-alone entries are one too: one free port for 3000.
	if strings.Join(got, " ") != "127.0.0.1:8000:80 127.0.0.1:0:3000" {
		t.Errorf("Published() = %q", got)
	}
}

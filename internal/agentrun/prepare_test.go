package agentrun

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/config"
)

// fakeAgent puts a fake-agent command on PATH and returns a profile for it
// whose Launch records its inputs.
func fakeAgent(t *testing.T, got *agents.Inputs) *agents.Profile {
	t.Helper()
	t.Setenv("AIRLOCK_DATA_DIR", t.TempDir())
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "fake-agent"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	return &agents.Profile{
		Name: "fake", Display: "Fake", Binary: "fake-agent",
		Hosts: []string{"api.fake.example"},
		Keys:  []agents.Key{{Env: "FAKE_API_KEY", Hosts: []string{"api.fake.example"}}},
		Launch: func(in agents.Inputs) (agents.Launch, error) {
			*got = in
			return agents.Launch{Argv: append([]string{"fake-agent", "--yes"}, in.Args...), Env: []string{"FAKE_MODE=1"},
				Files: map[string][]byte{".fake/settings.json": []byte(`{"ok":true}`)}}, nil
		},
	}
}

func TestPrepareReturnsTheCommandKeysAndHomeAndAddsTheProfileToTheSpec(t *testing.T) {
	var in agents.Inputs
	p := fakeAgent(t, &in)
	t.Setenv("FAKE_API_KEY", "sk-real-value-0123456789")
	ws := t.TempDir()
	sc := &config.Spec{Workspace: config.Workspace{Path: ws}, Network: config.Network{AllowHosts: []string{"example.com"}}}
	pr, err := Prepare(Request{Profile: p, Spec: sc, Args: []string{"-p", "hi"}, Stderr: io.Discard, Quiet: true})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	defer pr.Stop()
	if want := []string{filepath.Join(os.Getenv("PATH"), "fake-agent"), "--yes", "-p", "hi"}; !slices.Equal(pr.Argv, want) {
		t.Errorf("Argv = %q, want %q (the CLI's path first)", pr.Argv, want)
	}
	if len(pr.Secrets) != 1 || in.Keys["FAKE_API_KEY"] != pr.Secrets[0].Placeholder || strings.Contains(in.Keys["FAKE_API_KEY"], "sk-real") {
		t.Errorf("secrets %v, keys %v: want one secret whose placeholder the agent sees", pr.Secrets, in.Keys)
	}
	if !slices.Contains(pr.Env, "FAKE_MODE=1") || !slices.Contains(pr.Env, "NODE_USE_ENV_PROXY=1") {
		t.Errorf("Env = %q, want the profile's and Launch's variables", pr.Env)
	}
	if !slices.Equal(sc.Network.AllowHosts, []string{"example.com", "api.fake.example"}) || sc.Home != pr.Home || pr.Home == "" {
		t.Errorf("spec after Prepare: hosts %q home %q; want the provider added and the agent's home (%q)", sc.Network.AllowHosts, sc.Home, pr.Home)
	}
	if b, err := os.ReadFile(filepath.Join(pr.Home, ".fake", "settings.json")); err != nil || string(b) != `{"ok":true}` {
		t.Errorf("the profile's file in the home: %q, %v", b, err)
	}
	if !strings.HasPrefix(pr.Home, os.Getenv("AIRLOCK_DATA_DIR")) {
		t.Errorf("home %s is not under airlock's data dir", pr.Home)
	}
}

func TestPrepareRefusesWhatItCannotRunAndSaysWhy(t *testing.T) {
	var in agents.Inputs
	p := fakeAgent(t, &in)
	t.Setenv("FAKE_API_KEY", "")
	ws := t.TempDir()
	spec := func() *config.Spec { return &config.Spec{Workspace: config.Workspace{Path: ws}} }
	if _, err := Prepare(Request{Profile: p, Spec: spec(), Stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), "set FAKE_API_KEY on the host") {
		t.Errorf("Prepare without a key = %v, want one naming the variable", err)
	}
	t.Setenv("FAKE_API_KEY", "sk-real-value-0123456789")
	sc := spec()
	sc.MCPServers = []any{"not a map"}
	var se ServersError
	if _, err := Prepare(Request{Profile: p, Spec: sc, Stderr: io.Discard}); !errors.As(err, &se) {
		t.Errorf("Prepare with a bad MCP server = %v, want a ServersError", err)
	}
	if _, err := Prepare(Request{Profile: p, Spec: spec(), Resume: "last", Stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), "no fake session recorded") {
		t.Errorf("Prepare --resume last with none = %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Prepare(Request{Profile: p, Spec: spec(), Stderr: io.Discard}); err == nil || !strings.Contains(err.Error(), "is not installed") {
		t.Errorf("Prepare without the CLI = %v, want one saying it is not installed", err)
	}
}

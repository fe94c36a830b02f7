//go:build linux

package main

import (
	"reflect"
	"testing"

	"github.com/spf13/pflag"

	"github.com/airlock-dev/airlock/internal/config"
)

// Only the flags the user set are a layer: a default must not hide a file's
// value.
func TestConfigFlagLayerTakesOnlySetFlags(t *testing.T) {
	c := newRunCmd()
	if err := c.Flags().Parse([]string{"--memory", "3g", "--allow-host", "a.com", "--allow-host", "b.com", "--protect-git=false", "-e", "X=1"}); err != nil {
		t.Fatal(err)
	}
	l, err := flagLayer(c.Flags())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"limits.pids", "network.mode", "workspace.mode", "backend", "limits.cpus"} {
		if l.Set(key) {
			t.Errorf("flag layer sets %s, which was left at its default", key)
		}
	}
	file, err := config.Parse("/cfg.yaml", []byte("limits: {pids: 5, memory: 1g}\nnetwork: {allow_hosts: [c.com]}\n"), config.SourceGlobal)
	if err != nil {
		t.Fatal(err)
	}
	s, or := config.Merge(config.Defaults(), file, l)
	if s.Limits.Pids != 5 || s.Limits.MemoryBytes != 3<<30 || s.Workspace.ProtectGit {
		t.Errorf("merged limits %+v, protect_git %v; want pids 5 from the file, memory 3g and protect_git false from flags", s.Limits, s.Workspace.ProtectGit)
	}
	if want := []string{"c.com", "a.com", "b.com"}; !reflect.DeepEqual(s.Network.AllowHosts, want) {
		t.Errorf("allow_hosts = %q, want %q", s.Network.AllowHosts, want)
	}
	if got := or["limits.memory"][0].String(); got != "flag --memory" {
		t.Errorf("origin of limits.memory = %q, want flag --memory", got)
	}
}

// Every config key a run flag sets exists, and every flag of run that is a
// setting has a key.
func TestConfigRunFlagKeys(t *testing.T) {
	c := newRunCmd()
	notSettings := map[string]bool{"workspace": true, "tty": true, "detach": true, "name": true, "keep": true, "quiet": true, "help": true, "watch-files": true, "scratch": true, "ask": true, "no-config-files": true,
		"no-hide":      true, // filesystem.hide_defaults: false, as --ask is approvals.mode ask
		"no-idmap":     true, // an unsafe opt-out for one run, never from a file
		"workdir":      true, // where one command starts
		"branch":       true, // one run's worktree, never from a file
		"spec-fd":      true, // the whole spec from elsewhere (internal/childspec), no other flag beside it
		"devcontainer": true} // the workspace's devcontainer.json, read and trusted for one run
	mapped := map[string]bool{}
	l := config.NewLayer(config.SourceFlag, "")
	for _, fk := range runFlagKeys {
		mapped[fk.flag] = true
		f := c.Flags().Lookup(fk.flag)
		if f == nil {
			t.Errorf("runFlagKeys names --%s, which run does not have", fk.flag)
			continue
		}
		if err := l.SetFlag(fk.key, "--"+fk.flag, []string{f.DefValue}); err != nil && f.DefValue != "" && f.DefValue != "[]" {
			t.Errorf("SetFlag(%s, --%s, default %q) = %v", fk.key, fk.flag, f.DefValue, err)
		}
	}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !mapped[f.Name] && !notSettings[f.Name] {
			t.Errorf("run flag --%s has no config key in runFlagKeys", f.Name)
		}
	})
}

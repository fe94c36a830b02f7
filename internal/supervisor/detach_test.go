package supervisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/state"
)

// fakeSupervisor writes a script that stands in for `airlock __supervise
// DIR`: it sees what the real one would (its args, fds 3 and 4).
func fakeSupervisor(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "supervise")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newHandle(t *testing.T) (*state.Store, *state.Handle) {
	t.Helper()
	st, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.Create("")
	if err != nil {
		t.Fatal(err)
	}
	return st, h
}

func TestDetachHandsTheLockAndSpecToTheChildAndWaitsForOk(t *testing.T) {
	_, h := newHandle(t)
	dir := h.Dir()
	out := filepath.Join(t.TempDir(), "seen")
	// The child proves it got the command word, the dir, and both fds.
	self := fakeSupervisor(t, `echo "$1 $2" > `+out+`; test -e /proc/self/fd/3 && echo lock >> `+out+`; echo ok >&4`)
	spec := engine.Spec{Command: []string{"true"}, Detached: true}
	if err := Detach(h, spec, self, "__supervise", nil); err != nil {
		t.Fatalf("Detach = %v, want nil", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "__supervise "+dir+"\nlock\n"; got != want {
		t.Errorf("the child saw %q, want %q", got, want)
	}
	b, err = os.ReadFile(filepath.Join(dir, "sandbox.json"))
	if err != nil {
		t.Fatalf("the record Detach wrote: %v", err)
	}
	var rec state.Record
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if !rec.Detached || !strings.Contains(string(rec.Config), `"true"`) {
		t.Errorf("record = %+v, want a detached record holding the spec", rec)
	}
}

func TestDetachReportsTheChildsErrorAndAChildThatSaidNothing(t *testing.T) {
	_, h := newHandle(t)
	err := Detach(h, engine.Spec{}, fakeSupervisor(t, `echo "error: no room at the inn" >&4`), "__supervise", nil)
	if err == nil || err.Error() != "no room at the inn" {
		t.Errorf("Detach = %v, want the child's own error", err)
	}
	_, h = newHandle(t)
	err = Detach(h, engine.Spec{}, fakeSupervisor(t, `exit 3`), "__supervise", nil)
	if err == nil || !strings.Contains(err.Error(), "exited before the sandbox started") || !strings.Contains(err.Error(), h.LogPath()) {
		t.Errorf("Detach = %v, want one naming the log", err)
	}
}

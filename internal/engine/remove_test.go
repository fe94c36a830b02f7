package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/internal/state"
)

// TestRemoveTakesAStoppedSandboxAndRefusesARunningOne: what a stopped
// sandbox left (its state dir entry, its workspace session's directory)
// goes; a sandbox whose supervisor still holds it stays, whole.
func TestRemoveTakesAStoppedSandboxAndRefusesARunningOne(t *testing.T) {
	store, err := state.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	made := func() (*state.Handle, state.Entry) {
		t.Helper()
		h, err := store.Create("")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(WorkspaceDir(h.Dir()), "upper"), 0o700); err != nil {
			t.Fatal(err)
		}
		e, err := store.Resolve(h.ID())
		if err != nil {
			t.Fatal(err)
		}
		return h, e
	}
	running, e := made()
	if err := Remove(context.Background(), store, e); !errors.Is(err, state.ErrRunning) {
		t.Errorf("Remove of a running sandbox = %v, want ErrRunning", err)
	}
	if _, err := os.Stat(running.Dir()); err != nil {
		t.Errorf("a running sandbox's directory went: %v", err)
	}
	running.SetStatus(state.Status{State: state.Exited})
	running.Release()
	if e, err = store.Resolve(e.Record.ID); err != nil {
		t.Fatal(err)
	}
	if err := Remove(context.Background(), store, e); err != nil {
		t.Fatalf("Remove of a stopped sandbox: %v", err)
	}
	if _, err := store.Resolve(e.Record.ID); err == nil {
		t.Error("the stopped sandbox is still listed")
	}
	if _, err := os.Stat(e.Dir); !os.IsNotExist(err) {
		t.Errorf("its directory is still there: %v", err)
	}
}

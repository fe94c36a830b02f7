package engine

import (
	"context"
	"fmt"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Remove is Close for a sandbox whose host is gone (airlock rm, prune):
// it removes what the sandbox e of store left, the reverse of the order
// Start made it: the backend's part (its cgroups; the docker backend's
// container, the vm backend's files), the workspace session's directory
// (overlayfs' scratch dir made removable), and last its state dir entry,
// which store refuses to delete while a supervisor holds it (ErrRunning).
func Remove(ctx context.Context, store *state.Store, e state.Entry) error {
	id := e.Record.ID
	if st := e.Status.State; st == state.Running || st == state.Creating {
		return fmt.Errorf("engine: remove %s: %w", id, state.ErrRunning) // nothing of it touched
	}
	if err := removeCgroups(e.Record.Cgroups); err != nil {
		return fmt.Errorf("engine: remove %s: cgroups: %w", id, err)
	}
	if n := e.Record.Backend; n != "" && n != config.BackendNative {
		be, err := backendFor(n, "", nil)
		if err != nil {
			return fmt.Errorf("engine: remove %s: %w", id, err)
		}
		if _, err := be.Prune(ctx, store.Root(), func(other string) bool { return other != id }); err != nil {
			return fmt.Errorf("engine: remove %s: %s backend: %w", id, n, err)
		}
	}
	if err := workspace.Release(WorkspaceDir(e.Dir)); err != nil {
		return fmt.Errorf("engine: remove %s: workspace: %w", id, err)
	}
	return store.Delete(id)
}

//go:build airlock_front

package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
)

// The lean front's engine names what it lacks before anything is made, and
// never prunes native alone when asked for every backend.
func TestTheFrontsEngineSaysWhatItLacks(t *testing.T) {
	var nb *NotBuiltIn
	for what, c := range map[string]config.Spec{
		"docker backend": {Backend: config.BackendDocker},
		"vm backend":     {Backend: config.BackendVM},
		"MCP proxy":      {MCPServers: map[string]any{"fs": map[string]any{"command": "x"}}},
	} {
		if err := BuiltIn(&Spec{Config: c}); !errors.As(err, &nb) || nb.What != what {
			t.Errorf("BuiltIn(%s) = %v, want a *NotBuiltIn for it", what, err)
		}
	}
	if err := BuiltIn(&Spec{Config: config.Spec{Backend: config.BackendNative}}); err != nil {
		t.Errorf("BuiltIn(native) = %v", err)
	}
	if _, err := Prune(context.Background(), t.TempDir(), func(string) bool { return false }, false); !errors.As(err, &nb) {
		t.Errorf("Prune = %v, want a *NotBuiltIn", err)
	}
}

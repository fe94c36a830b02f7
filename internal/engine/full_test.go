//go:build !airlock_front

package engine

import (
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
)

// The full build has every backend and the MCP proxy: nothing is handed on.
func TestTheFullEngineLacksNothing(t *testing.T) {
	for _, c := range []config.Spec{{Backend: config.BackendDocker}, {Backend: config.BackendVM}, {MCPServers: map[string]any{}}} {
		if err := BuiltIn(&Spec{Config: c}); err != nil {
			t.Errorf("BuiltIn(%+v) = %v", c, err)
		}
	}
}

package supervisor

import (
	"testing"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
)

func TestWhatAnEndedSandboxLeavesBehind(t *testing.T) {
	for _, c := range []struct {
		name    string
		spec    engine.Spec
		sbName  string
		changes bool
		reason  string
		kept    bool
	}{
		{name: "a foreground run with nothing to review leaves nothing", kept: false},
		{name: "a foreground run with network leaves nothing either", spec: engine.Spec{Config: config.Spec{Network: config.Network{AllowHosts: []string{"example.com"}}}}, kept: false},
		{name: "--keep keeps a run", spec: engine.Spec{Keep: true}, kept: true},
		{name: "a named run is kept, to be found by its name", sbName: "job", kept: true},
		{name: "a detached sandbox is kept", spec: engine.Spec{Detached: true}, kept: true},
		{name: "changes waiting for review are kept", changes: true, kept: true},
		{name: "a run airlock ended is kept, to see what happened", reason: "stopped the sandbox: --timeout 1s reached", kept: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Kept(c.spec, c.sbName, c.changes, c.reason); got != c.kept {
				t.Errorf("Kept = %v, want %v", got, c.kept)
			}
		})
	}
}

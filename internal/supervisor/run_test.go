package supervisor

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/proto"
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

// A signal during the start ends the start, unless the run's command has
// started (its first output may be out before Start returns): then it is
// the command's, handed on once Start returns. The signal goes in where
// signal.Notify puts it, so no real signal can end the test process.
func TestASignalDuringTheStartEndsItUnlessTheCommandRuns(t *testing.T) {
	for _, running := range []bool{false, true} {
		sv := &supervisor{sigs: make(chan os.Signal, 8)}
		o := engine.Options{First: &engine.Command{Req: &proto.Exec{Argv: []string{"true"}}}}
		ctx, early := sv.watchStart(&o)
		o.WhileSetup()
		if running {
			o.First.Started()
		}
		sv.sigs <- syscall.SIGWINCH // a resize is never a reason to stop
		sv.sigs <- syscall.SIGTERM
		select {
		case <-ctx.Done():
			if running {
				t.Error("the start was ended by a signal that was its running command's")
			}
		case <-time.After(200 * time.Millisecond):
			if !running {
				t.Error("a signal before the command started did not end the start")
			}
		}
		if got := early(); got != syscall.SIGTERM {
			t.Errorf("running %v: early() = %v, want SIGTERM", running, got)
		}
		signal.Stop(sv.sigs)
	}
}

package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/guestbin"
	"github.com/airlock-dev/airlock/internal/proto"
)

// With no Exe, the guest is the lean build this binary (the test binary,
// which imports guestbin too) holds, run from its cache: as root from a
// file its slot's ids may execute but not reach by path (mode 0700 dirs),
// as any user from a file nobody may write.
func TestWithoutExeTheLeanGuestRunsFromItsCache(t *testing.T) {
	if guestbin.ID() == "" {
		t.Skip("no lean guest is built in: go generate ./internal/guestbin (.ci/run does)")
	}
	if m := guestbin.Missing(); m != "" {
		t.Fatalf("the lean guest is %s", m)
	}
	cache := filepath.Join(t.TempDir(), "guest")
	ws, home := t.TempDir(), t.TempDir()
	c := backend.Spec{ID: fmt.Sprintf("t%d", time.Now().UnixNano()), Workspace: ws, HostHome: home}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sb, err := Start(ctx, &c, Options{GuestCache: cache, Env: func(string) string { return "" }})
	if err != nil {
		t.Fatalf("start sandbox: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", sb.GuestPID()))
	if err != nil || exe != guestbin.CachePath(cache) {
		t.Fatalf("the guest runs %q (%v), want the cached lean guest %s", exe, err, guestbin.CachePath(cache))
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", sb.GuestPID()))
	if strings.TrimSpace(string(comm)) != "airlock" {
		t.Errorf("the guest is named %q, want airlock", comm)
	}
	// It serves, writes the workspace, and no process inside holds a
	// descriptor of it or can reach it (its own PID 1's exe link).
	r := run(t, sb, sh(`echo hi > out; cat out; ls -l /proc/self/fd/ | grep -c guest; readlink /proc/1/exe || echo unreadable`), nil)
	if got := r.stdout.String(); r.exit == nil || got != "hi\n0\nunreadable\n" {
		t.Errorf("got %q (stderr %q, exit %+v)", got, r.stderr.String(), r.exit)
	}
	if m := mustCall(t, sb, &proto.Msg{Op: proto.OpStat, Path: filepath.Join(ws, "out")}); m.Op == proto.OpError {
		t.Errorf("stat the file written: %+v", m.Err)
	}
}

package sandbox

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTheApproverFunctionDecides: with approvals ask, a connection no rule
// covers goes to the Go function; its allow lets the connection through,
// its deny refuses it, and both are approval events.
func TestTheApproverFunctionDecides(t *testing.T) {
	// The local CA lives in the config dir: one of the test's own (uid
	// 65534's home does not exist).
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.9:0")
	if err != nil {
		t.Skipf("no 127.0.0.9 here: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") })}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	var asked []ApprovalEvent
	sb := newSandbox(t, &Config{
		Approvals: &ApprovalsConfig{Mode: "ask"},
		Network:   &NetworkConfig{AddHosts: []string{"yes.test:127.0.0.9", "no.test:127.0.0.9"}},
		Approver: func(e ApprovalEvent) ApprovalDecision {
			mu.Lock()
			asked = append(asked, e)
			mu.Unlock()
			return ApprovalDecision{Allow: e.Host == "yes.test"}
		},
	})
	r, err := sb.Exec(fmt.Sprintf(`curl -fsS -p --max-time 20 http://yes.test:%d/; echo; curl -fsS -p --max-time 20 http://no.test:%d/ >/dev/null 2>&1 || echo refused`, port, port))
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "reached\nrefused\n" {
		t.Fatalf("exec = %+v, want the allowed host reached and the other refused", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || asked[0].Phase != "request" || !strings.HasPrefix(asked[0].ID, sb.ID()+"-") {
		t.Fatalf("the approver saw %+v, want two requests of this sandbox", asked)
	}
	seen := map[string]bool{}
	for deadline := time.Now().Add(5 * time.Second); len(seen) < 2 && time.Now().Before(deadline); {
		select {
		case e := <-sb.Events():
			if a := e.Approval; a != nil && a.Phase == "resolved" && a.By == "api" {
				seen[a.Decision] = true
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !seen["allow"] || !seen["deny"] {
		t.Errorf("resolved approval events by api: %v, want an allow and a deny", seen)
	}
}

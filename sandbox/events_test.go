package sandbox

import (
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
)

// TestEveryAuditKindIsAnEvent: each kind the audit log has reaches the
// API: network, file, exec and approval in their own shapes, every other
// kind (mcp, hostexec, llm, workspace, lifecycle, audit) as its record.
func TestEveryAuditKindIsAnEvent(t *testing.T) {
	at := time.Unix(1700000000, 0)
	code := 3
	for _, tc := range []struct {
		r    audit.Record
		typ  string
		want func(Event) bool
	}{
		{audit.Record{Kind: audit.KindHTTP, Host: "a.example", Port: 443, Method: "GET", Path: "/x", Status: 200, Decision: "allow"}, "network",
			func(e Event) bool { return e.Network != nil && e.Network.URL == "https://a.example/x" }},
		{audit.Record{Kind: audit.KindDNS, Host: "a.example", Decision: "deny"}, "network", func(e Event) bool { return e.Network.Blocked }},
		{audit.Record{Kind: audit.KindFile, Op: "write", Path: "/workspace/f"}, "file", func(e Event) bool { return e.File.Path == "/workspace/f" }},
		{audit.Record{Kind: audit.KindExec, Subject: "make", ExitCode: &code}, "exec", func(e Event) bool { return e.Exec.Phase == "exit" && e.Exec.ExitCode == 3 }},
		{audit.Record{Kind: audit.KindApproval, Decision: "allow", Subject: "a.example", Rule: "session", Extra: map[string]string{"request": "r1", "by": "rpc"}}, "approval",
			func(e Event) bool {
				return e.Approval.Phase == "resolved" && e.Approval.ID == "r1" && e.Approval.By == "rpc"
			}},
		{audit.Record{Kind: audit.KindMCP, Decision: "deny", Subject: "fs/write_file", Reason: "outside the root"}, "mcp",
			func(e Event) bool {
				return e.Record.Subject == "fs/write_file" && e.Record.Reason == "outside the root"
			}},
		{audit.Record{Kind: audit.KindHostExec, Decision: "error", Subject: "gh", Reason: "exit 1"}, "hostexec", func(e Event) bool { return e.Record.Decision == "error" }},
		{audit.Record{Kind: audit.KindLLM, Subject: "claude", Status: 200, Extra: map[string]string{"tokens": "12"}}, "llm", func(e Event) bool { return e.Record.Extra["tokens"] == "12" }},
		{audit.Workspace(audit.OpApply, "apply", 1, 2, 3), "workspace", func(e Event) bool { return e.Record.Op == "apply" && e.Record.Deleted == 3 }},
		{audit.Lifecycle(audit.OpStop, "native", ""), "lifecycle", func(e Event) bool { return e.Record.Op == "stop" && e.Record.Backend == "native" }},
		{audit.Record{Kind: audit.KindAudit, Decision: audit.DecisionSuppressed, Count: 5}, "audit", func(e Event) bool { return e.Record.Count == 5 }},
	} {
		tc.r.Time = at
		e, ok := eventOf(tc.r)
		if !ok || e.Type != tc.typ || e.Timestamp != at.Unix() || !tc.want(e) {
			t.Errorf("%s record: event %+v (ok %v), want type %s", tc.r.Kind, e, ok, tc.typ)
		}
	}
	if _, ok := eventOf(audit.Record{}); ok {
		t.Error("a record with no kind became an event")
	}
}

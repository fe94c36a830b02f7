package audit

import "time"

// Kinds of record, and the fields each uses besides Time, Sandbox, Kind and Decision.
const (
	KindNetwork   = "network"   // Host, IP, Port, Rule, Reason; BytesIn/BytesOut/Duration when a connection ends
	KindDNS       = "dns"       // Host, IP (the address answered), Rule, Reason, Extra["qtype"]
	KindHTTP      = "http"      // Host, IP, Port, Method, Path, Status, Rule, Reason, bytes and Duration
	KindExec      = "exec"      // Argv, Subject (argv[0]); ExitCode and Duration when it has ended
	KindFile      = "file"      // Op, Path
	KindWorkspace = "workspace" // Op (review, apply, discard), Decision (the outcome), Added/Modified/Deleted
	KindLifecycle = "lifecycle" // Op (create, start, stop, crash), Backend, Reason
	KindAudit     = "audit"     // the log about itself: DecisionSuppressed, DecisionRotated
	KindApproval  = "approval"
	KindMCP       = "mcp"
	KindHostExec  = "hostexec"
	// KindLLM is one LLM API response seen at the gateway (or a request
	// refused because the budget is spent): Host, Method, Path, Status,
	// Subject (the model), Decision, Reason; Extra holds the API, this
	// response's tokens (input, output, cache_read, cache_write, tokens) and
	// cost (usd; usd_estimated when the model has no price), and the
	// sandbox's running totals (total_*, budget_*).
	KindLLM = "llm"
	// KindInbound is one connection to a published port, recorded when it
	// ends: IP the host's client, Port the sandbox's port, Extra["peer"]
	// the client's address and Extra["listen"] the host address it came
	// to; BytesIn into the sandbox, BytesOut out of it, Duration. Decision
	// allow, or error (nothing answered inside) with Reason.
	KindInbound = "inbound"
)

// Decisions.
const (
	Allow         = "allow"
	Deny          = "deny"
	Ask           = "ask"
	Error         = "error" // failed (an outage, a dial error), not refused
	SecretBlocked = "secret_blocked"

	DecisionSuppressed = "suppressed" // kind audit: Count records of Subject ("kind decision") not written one by one
	DecisionRotated    = "rotated"    // kind audit: the file was rotated; Count records were removed
	// DecisionLost: kind audit, Subject otlp: records (Extra["records"]) and
	// spans (Extra["spans"]) the collector did not get since the last such
	// record (a full queue, a failed export), Reason the last failure.
	DecisionLost = "lost"
)

// Ops of file, workspace and lifecycle records.
const (
	OpCreate = "create" // lifecycle: the sandbox was made; file: a file was created
	OpStart  = "start"
	OpStop   = "stop"
	OpCrash  = "crash"
	OpWrite  = "write"
	OpRemove = "remove"
	OpRename = "rename"

	OpReview  = "review"
	OpApply   = "apply"
	OpDiscard = "discard"
)

// Exec is the record of a command started in the sandbox.
func Exec(argv []string) Record {
	r := Record{Kind: KindExec, Argv: argv}
	if len(argv) > 0 {
		r.Subject = argv[0]
	}
	return r
}

// ExecExit is the record of a command that ended with code after took.
func ExecExit(argv []string, code int, took time.Duration) Record {
	r := Exec(argv)
	r.ExitCode, r.Duration = &code, Millis(took)
	return r
}

// File is the record of a change op to path seen by the file watcher.
func File(op, path string) Record {
	return Record{Kind: KindFile, Op: op, Path: path}
}

// Workspace is the record of a workspace step (OpReview, OpApply, OpDiscard), its
// outcome (e.g. "apply", "discard", "keep", Error) and the files it concerned.
func Workspace(op, outcome string, added, modified, deleted int) Record {
	return Record{Kind: KindWorkspace, Op: op, Decision: outcome, Added: added, Modified: modified, Deleted: deleted}
}

// Lifecycle is the record of a sandbox being created, started, stopped or crashing
// (then Decision is Error), on backend, for reason.
func Lifecycle(op, backend, reason string) Record {
	r := Record{Kind: KindLifecycle, Op: op, Backend: backend, Reason: reason}
	if op == OpCrash {
		r.Decision = Error
	}
	return r
}

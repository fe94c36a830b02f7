//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP collector on loopback decoding with the
// official protos: the host-side evidence of what airlock exported.
type otlpReceiver struct {
	url     string
	mu      sync.Mutex
	logs    []*logspb.LogRecord
	res     []map[string]string
	spans   []*tracepb.Span
	headers []http.Header
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.headers = append(rc.headers, r.Header.Clone())
		switch r.URL.Path {
		case "/v1/logs":
			var req collogs.ExportLogsServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("receiver: %v", err)
			}
			for _, rl := range req.ResourceLogs {
				rc.res = append(rc.res, otlpAttrs(rl.Resource.GetAttributes()))
				for _, sl := range rl.ScopeLogs {
					rc.logs = append(rc.logs, sl.LogRecords...)
				}
			}
		case "/v1/traces":
			var req coltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("receiver: %v", err)
			}
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					rc.spans = append(rc.spans, ss.Spans...)
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL
	return rc
}

func otlpAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		if a := kv.Value.GetArrayValue(); a != nil {
			var s []string
			for _, v := range a.Values {
				s = append(s, v.GetStringValue())
			}
			m[kv.Key] = strings.Join(s, " ")
		} else if _, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
			m[kv.Key] = fmt.Sprint(kv.Value.GetIntValue())
		} else {
			m[kv.Key] = kv.Value.GetStringValue()
		}
	}
	return m
}

// A run with audit.otlp set exports its audit: the allowed request and the
// refused one arrive as log records with their attributes, the run and its
// command as spans; the collector's token (config and host variable)
// reaches the collector and nowhere else: not the sandbox, the audit, the
// run's output or config show.
func TestOTLPExportsARunsAuditToARealReceiver(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	rc := newOTLPReceiver(t)
	e.writeConfig(fmt.Sprintf("version: 1\naudit:\n  otlp:\n    endpoint: %s\n    insecure: true\n    headers:\n      Authorization: Bearer cfgtok-s3cret\n", rc.url))
	ip := strings.Split(u.addr, ":")[0]
	tag := fmt.Sprintf("otlp%d", time.Now().UnixNano())
	flags := u.flags("--allow-host", "example.com", "--add-host", "refused.other.test:"+ip)
	script := fmt.Sprintf(`curl -s -o /dev/null http://example.com/%s; curl -s -o /dev/null http://refused.other.test/%s; env`, tag, tag)
	c := e.cmd(append(flags, "--keep", "--name", "otel", "--", "sh", "-c", script)...)
	c.Env = append(c.Env, "OTEL_EXPORTER_OTLP_HEADERS=x-env-token=envtok-s3cret")
	r := e.runCmd(c)
	if r.code != 0 || !strings.Contains(u.received(t), "GET /"+tag) {
		t.Fatalf("the run (the positive control) did not reach the allowed host: %v", r)
	}
	if strings.Contains(u.received(t), "refused.other.test/"+tag) {
		t.Fatalf("the refused host was reached")
	}
	show := e.run("config", "show")
	audit := e.run("audit", "--json", "otel")
	for what, s := range map[string]string{"the sandbox's env and the run's output": r.stdout + r.stderr, "config show": show.stdout + show.stderr, "the audit": audit.stdout} {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "OTEL_EXPORTER") || strings.Contains(s, "AIRLOCK_OTLP") {
			t.Errorf("a collector token or variable is in %s:\n%s", what, s)
		}
	}
	if !strings.Contains(show.stdout, "- Authorization=[redacted]") {
		t.Errorf("config show does not name the header redacted:\n%s", show.stdout)
	}
	// Nor on disk: the state dir holds the spec, never the headers.
	filepath.WalkDir(e.state, func(p string, d os.DirEntry, err error) error {
		if b, _ := os.ReadFile(p); err == nil && !d.IsDir() && strings.Contains(string(b), "s3cret") {
			t.Errorf("a collector token is in %s", p)
		}
		return nil
	})

	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, h := range rc.headers {
		if h.Get("Authorization") != "Bearer cfgtok-s3cret" || h.Get("X-Env-Token") != "envtok-s3cret" {
			t.Errorf("the receiver got headers %v", h)
		}
	}
	var allowed, refused bool
	for _, l := range rc.logs {
		a := otlpAttrs(l.Attributes)
		if a["airlock.host"] == "example.com" && a["airlock.decision"] == "allow" {
			allowed = true
		}
		if a["airlock.host"] == "refused.other.test" && a["airlock.decision"] == "deny" && l.SeverityNumber == logspb.SeverityNumber_SEVERITY_NUMBER_WARN {
			refused = true
		}
	}
	if !allowed || !refused || len(rc.res) == 0 || rc.res[0]["airlock.sandbox.name"] != "otel" || rc.res[0]["airlock.sandbox.id"] == "" {
		var got []string
		for _, l := range rc.logs {
			got = append(got, fmt.Sprint(otlpAttrs(l.Attributes)))
		}
		t.Errorf("allow record %v, refusal %v, resources %v; the receiver got:\n%s", allowed, refused, rc.res, strings.Join(got, "\n"))
	}
	names := map[string]*tracepb.Span{}
	for _, s := range rc.spans {
		names[s.Name] = s
	}
	run, exec := names["airlock.run"], names["airlock.exec"]
	if run == nil || exec == nil || exec.EndTimeUnixNano <= exec.StartTimeUnixNano || run.EndTimeUnixNano < exec.EndTimeUnixNano {
		t.Errorf("spans %v: want airlock.run and airlock.exec with durations, the run's the longer", names)
	}
}

// A collector that is down costs the run a line, not its result: the
// command's output and status are what they are without OTLP, the run ends
// well within its own timeout, and the loss is in the audit.
func TestOTLPCollectorDownTheRunGoesOnWithTheLossCounted(t *testing.T) {
	e := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // connection refused from here on
	e.writeConfig(fmt.Sprintf("version: 1\naudit:\n  otlp:\n    endpoint: http://%s\n    insecure: true\n", addr))
	start := time.Now()
	r := e.run("run", "--keep", "--name", "down", "--allow-host", "example.com", "--timeout", "60s", "--", "sh", "-c", "echo out; exit 3")
	if took := time.Since(start); r.code != 3 || r.stdout != "out\n" || took > 30*time.Second {
		t.Fatalf("run with the collector down: %v after %v; want exit 3 and its output, well within its timeout", r, took)
	}
	if n := strings.Count(r.stderr, "otlp:"); n != 1 || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("stderr %q: want one line naming the refused connection", r.stderr)
	}
	a := e.run("audit", "--json", "down")
	if !strings.Contains(a.stdout, `"kind":"audit","subject":"otlp","decision":"lost"`) {
		t.Errorf("no loss record in the audit:\n%s", a.stdout)
	}
	// The bad input the config can hold: one line, exit 125, nothing run.
	e.writeConfig("version: 1\naudit:\n  otlp:\n    endpoint: http://" + addr + "\n")
	if r := e.run("run", "--", "echo", "ran"); r.code != 125 || strings.Contains(r.stdout, "ran") || !strings.HasPrefix(r.stderr, "airlock: audit.otlp.endpoint: http:// sends the audit in the clear: use https://, or set audit.otlp.insecure: true\n") {
		t.Errorf("an http endpoint without insecure: %v; want one line and exit 125", r)
	}
}

// An LLM call through the gateway is a span with its token counts.
func TestOTLPAnLLMCallIsASpanWithItsTokens(t *testing.T) {
	caFile, _ := fakeMessages(t)
	e := newEnv(t)
	rc := newOTLPReceiver(t)
	c := e.cmd("run", "-q", "--add-host", "llm.example.com:"+strings.Split(llmAddr, ":")[0], "--upstream-ca", caFile,
		"--allow-host", "llm.example.com", "--", "sh", "-c",
		`curl -sS https://llm.example.com/v1/messages -H 'content-type: application/json' -d '{"model":"claude-haiku-4-5"}'`)
	c.Env = append(c.Env, "OTEL_EXPORTER_OTLP_ENDPOINT="+rc.url)
	if r := e.runCmd(c); r.code != 0 || !strings.Contains(r.stdout, "claude-haiku-4-5") {
		t.Fatalf("the LLM call (the positive control) failed: %v", r)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, s := range rc.spans {
		if s.Name == "airlock.llm" {
			a := otlpAttrs(s.Attributes)
			if a["gen_ai.usage.input_tokens"] != "30" || a["gen_ai.usage.output_tokens"] != "25" || a["airlock.llm.tokens"] != "60" || a["gen_ai.request.model"] != "claude-haiku-4-5" {
				t.Errorf("llm span attributes %v", a)
			}
			return
		}
	}
	t.Errorf("no airlock.llm span among %d spans", len(rc.spans))
}

// A collector that takes the requests and never answers holds the run no
// longer than the exporter's bounds; the loss is audited.
func TestOTLPSlowCollectorDoesNotHoldTheRun(t *testing.T) {
	e := newEnv(t)
	quit := make(chan struct{})
	var hits sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		defer hits.Done()
		select {
		case <-quit:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(quit)
	c := e.cmd("run", "--keep", "--name", "slow", "--", "sh", "-c", "echo out")
	c.Env = append(c.Env, "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL)
	start := time.Now()
	r := e.runCmd(c)
	if took := time.Since(start); r.code != 0 || r.stdout != "out\n" || took > 30*time.Second {
		t.Fatalf("run with a collector that never answers: %v after %v", r, took)
	}
	if a := e.run("audit", "--json", "slow"); !strings.Contains(a.stdout, `"kind":"audit","subject":"otlp","decision":"lost"`) {
		t.Errorf("no loss record in the audit:\n%s", a.stdout)
	}
}

// A detached sandbox's supervisor sends with the config's headers, which
// its spec on disk never holds.
func TestOTLPADetachedSandboxSendsWithTheConfigHeaders(t *testing.T) {
	e := newEnv(t)
	rc := newOTLPReceiver(t)
	e.writeConfig(fmt.Sprintf("version: 1\naudit:\n  otlp:\n    endpoint: %s\n    insecure: true\n    headers:\n      Authorization: Bearer dettok-s3cret\n", rc.url))
	if r := e.run("run", "-d", "-q", "--name", "det"); r.code != 0 {
		t.Fatalf("run -d: %v", r)
	}
	if r := e.run("exec", "det", "--", "sh", "-c", "exit 4"); r.code != 4 {
		t.Fatalf("exec: %v", r)
	}
	filepath.WalkDir(e.state, func(p string, d os.DirEntry, err error) error {
		if b, _ := os.ReadFile(p); err == nil && !d.IsDir() && strings.Contains(string(b), "s3cret") {
			t.Errorf("a collector token is in %s", p)
		}
		return nil
	})
	if r := e.run("kill", "det"); r.code != 0 {
		t.Fatalf("kill: %v", r)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		rc.mu.Lock()
		var exec bool
		for _, s := range rc.spans {
			exec = exec || s.Name == "airlock.exec" && otlpAttrs(s.Attributes)["process.exit.code"] == "4"
		}
		hs := rc.headers
		rc.mu.Unlock()
		if exec {
			for _, h := range hs {
				if h.Get("Authorization") != "Bearer dettok-s3cret" {
					t.Errorf("the receiver got headers %v", h)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exec span from the detached sandbox (%d spans, %d requests)", len(rc.spans), len(hs))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

package otlp

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP collector on loopback: it decodes what it gets
// with the official protos and keeps it, with each request's headers.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	logs    []*logspb.ResourceLogs
	spans   []*tracepb.ResourceSpans
	headers []http.Header
	delay   time.Duration
	quit    chan struct{} // ends slow handlers at cleanup
}

func newReceiver(t *testing.T, delay time.Duration) *receiver {
	rc := &receiver{delay: delay, quit: make(chan struct{})}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rc.delay > 0 {
			select {
			case <-time.After(rc.delay):
			case <-r.Context().Done():
				return
			case <-rc.quit:
				return
			}
		}
		body, err := io.ReadAll(r.Body)
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.headers = append(rc.headers, r.Header.Clone())
		switch r.URL.Path {
		case "/v1/logs":
			var req collogs.ExportLogsServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("receiver: logs: %v", err)
			}
			rc.logs = append(rc.logs, req.ResourceLogs...)
		case "/v1/traces":
			var req coltrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				t.Errorf("receiver: traces: %v", err)
			}
			rc.spans = append(rc.spans, req.ResourceSpans...)
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(rc.Close)
	t.Cleanup(func() { close(rc.quit) }) // first: Close waits for handlers
	return rc
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.Value
		switch {
		case v.GetArrayValue() != nil:
			var s []string
			for _, e := range v.GetArrayValue().Values {
				s = append(s, e.GetStringValue())
			}
			m[kv.Key] = strings.Join(s, " ")
		case v.GetStringValue() != "":
			m[kv.Key] = v.GetStringValue()
		default:
			m[kv.Key] = strconv.FormatInt(v.GetIntValue(), 10)
		}
	}
	return m
}

// sink collects the records the exporter writes into the audit.
type sink struct {
	mu  sync.Mutex
	got []audit.Record
}

func (s *sink) record(r audit.Record) { s.mu.Lock(); s.got = append(s.got, r); s.mu.Unlock() }

func (s *sink) lost() (records, spans string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.got {
		if r.Kind == audit.KindAudit && r.Decision == audit.DecisionLost {
			records, spans, n = r.Extra["records"], r.Extra["spans"], n+1
		}
	}
	return
}

func start(t *testing.T, endpoint string, headers []string) (*Exporter, *sink, *[]string) {
	t.Helper()
	cfg, ok, err := Resolve(config.OTLP{Endpoint: endpoint, Headers: headers, Insecure: true}, func(string) string { return "" })
	if err != nil || !ok {
		t.Fatalf("Resolve: %v %v", ok, err)
	}
	cfg.SandboxID, cfg.Name = "sbx123", "calm-otter"
	var warnings []string
	var wmu sync.Mutex
	s := &sink{}
	e, err := New(cfg, func(w string) { wmu.Lock(); warnings = append(warnings, w); wmu.Unlock() }, s.record)
	if err != nil {
		t.Fatal(err)
	}
	return e, s, &warnings
}

func TestRecordsArriveAsLogRecordsAndSpansAtARealReceiver(t *testing.T) {
	rc := newReceiver(t, 0)
	e, s, warnings := start(t, rc.URL, []string{"Authorization=Bearer tok-s3cret", "X-Scope=team-a"})
	now := time.Now().UTC()
	code := 3
	in := []audit.Record{
		{Time: now, Sandbox: "sbx123", Kind: audit.KindNetwork, Decision: audit.Allow, Host: "example.com", Port: 443, Rule: "allow_hosts example.com"},
		{Time: now, Sandbox: "sbx123", Kind: audit.KindNetwork, Decision: audit.Deny, Host: "evil.example", Port: 443, Reason: "not in allow_hosts"},
		{Time: now, Sandbox: "sbx123", Kind: audit.KindExec, Argv: []string{"sh", "-c", "exit 3"}, Subject: "sh", ExitCode: &code, Duration: audit.Millis(1500 * time.Millisecond)},
		{Time: now, Sandbox: "sbx123", Kind: audit.KindLLM, Decision: audit.Allow, Subject: "claude-x", Host: "api.anthropic.com", Status: 200, Duration: audit.Millis(200 * time.Millisecond),
			Extra: map[string]string{"api": "anthropic", "input": "12", "output": "34", "cache_read": "0", "cache_write": "0", "tokens": "46"}},
	}
	for _, r := range in {
		e.Put(r)
	}
	if recs, spans := e.Close(); recs != 0 || spans != 0 {
		t.Fatalf("lost %d records, %d spans to a working receiver; warnings %q", recs, spans, *warnings)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()

	var logs []*logspb.LogRecord
	for _, rl := range rc.logs {
		res := attrs(rl.Resource.Attributes)
		if res["airlock.sandbox.id"] != "sbx123" || res["airlock.sandbox.name"] != "calm-otter" || res["service.name"] != "airlock" {
			t.Errorf("resource attributes %v", res)
		}
		for _, sl := range rl.ScopeLogs {
			logs = append(logs, sl.LogRecords...)
		}
	}
	if len(logs) != len(in) {
		t.Fatalf("receiver got %d log records, want %d", len(logs), len(in))
	}
	allow, deny := attrs(logs[0].Attributes), attrs(logs[1].Attributes)
	if allow["airlock.kind"] != "network" || allow["airlock.decision"] != "allow" || allow["airlock.host"] != "example.com" || allow["airlock.port"] != "443" || allow["airlock.rule"] != "allow_hosts example.com" {
		t.Errorf("allow record attributes %v", allow)
	}
	if deny["airlock.decision"] != "deny" || deny["airlock.host"] != "evil.example" || deny["airlock.reason"] != "not in allow_hosts" || logs[1].SeverityNumber != logspb.SeverityNumber_SEVERITY_NUMBER_WARN {
		t.Errorf("deny record attributes %v severity %v", deny, logs[1].SeverityNumber)
	}
	if logs[0].TimeUnixNano != uint64(now.UnixNano()) || logs[0].EventName != "airlock.network" || len(logs[0].TraceId) != 16 {
		t.Errorf("log record time %d event %q trace %x", logs[0].TimeUnixNano, logs[0].EventName, logs[0].TraceId)
	}
	if a := attrs(logs[2].Attributes); a["airlock.argv"] != "sh -c exit 3" || a["airlock.exit_code"] != "3" {
		t.Errorf("exec record attributes %v", a)
	}

	spans := map[string]*tracepb.Span{}
	for _, rs := range rc.spans {
		if res := attrs(rs.Resource.Attributes); res["airlock.sandbox.id"] != "sbx123" {
			t.Errorf("span resource %v", res)
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				spans[sp.Name] = sp
			}
		}
	}
	run, exec, llm := spans["airlock.run"], spans["airlock.exec"], spans["airlock.llm"]
	if run == nil || exec == nil || llm == nil {
		t.Fatalf("spans %v: want airlock.run, airlock.exec and airlock.llm", spans)
	}
	if d := time.Duration(exec.EndTimeUnixNano - exec.StartTimeUnixNano); d != 1500*time.Millisecond || !bytes.Equal(exec.ParentSpanId, run.SpanId) {
		t.Errorf("exec span lasts %v, parent %x (run %x)", d, exec.ParentSpanId, run.SpanId)
	}
	if run.EndTimeUnixNano <= run.StartTimeUnixNano {
		t.Errorf("run span has no duration")
	}
	if a := attrs(llm.Attributes); a["gen_ai.usage.input_tokens"] != "12" || a["gen_ai.usage.output_tokens"] != "34" || a["airlock.llm.tokens"] != "46" || a["gen_ai.request.model"] != "claude-x" {
		t.Errorf("llm span attributes %v", a)
	}

	// The token reached the receiver, with every request, and nowhere else.
	for _, h := range rc.headers {
		if h.Get("Authorization") != "Bearer tok-s3cret" || h.Get("X-Scope") != "team-a" {
			t.Errorf("receiver got headers %v", h)
		}
	}
	if len(rc.headers) == 0 {
		t.Error("receiver got no request")
	}
	for _, r := range s.got {
		if strings.Contains(audit.Format(r, false), "tok-s3cret") {
			t.Errorf("the token is in an audit record: %v", r)
		}
	}
	if _, _, n := s.lost(); n != 0 {
		t.Errorf("a loss record with nothing lost: %v", s.got)
	}
}

func TestACollectorThatIsDownCostsTheRunNothingAndTheLossIsAudited(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // connection refused from now on
	e, s, warnings := start(t, "http://"+addr, []string{"Authorization=Bearer tok-s3cret"})
	t0 := time.Now()
	for i := range 10000 { // more than the queue holds: Put must never wait
		e.Put(audit.Record{Time: time.Now(), Kind: audit.KindNetwork, Decision: audit.Deny, Host: "h" + strconv.Itoa(i)})
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("10000 Puts took %v with the collector down", d)
	}
	recs, _ := e.Close()
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("Put and Close took %v with the collector down", d)
	}
	if recs != 10000 {
		t.Errorf("lost %d records, want all 10000", recs)
	}
	r, _, n := s.lost()
	if n == 0 || r == "0" || r == "" {
		t.Fatalf("no loss record in the audit: %v", s.got)
	}
	if len(*warnings) != 1 || !strings.Contains((*warnings)[0], "connection refused") || strings.Contains((*warnings)[0], "tok-s3cret") {
		t.Errorf("warnings %q: want one line naming the failure, without the token", *warnings)
	}
	// Positive control: the same records reach a receiver that is up.
	rc := newReceiver(t, 0)
	e2, _, _ := start(t, rc.URL, nil)
	e2.Put(audit.Record{Time: time.Now(), Kind: audit.KindNetwork, Decision: audit.Deny, Host: "h0"})
	if recs, _ := e2.Close(); recs != 0 {
		t.Errorf("lost %d records to a receiver that is up", recs)
	}
}

func TestASlowCollectorDoesNotHoldTheRunAndTheLossIsAudited(t *testing.T) {
	rc := newReceiver(t, time.Minute) // answers nothing within any timeout
	e, s, _ := start(t, rc.URL, nil)
	t0 := time.Now()
	for i := range 10000 {
		e.Put(audit.Record{Time: time.Now(), Kind: audit.KindFile, Op: audit.OpWrite, Path: "/w/f" + strconv.Itoa(i)})
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("10000 Puts took %v with the collector slow", d)
	}
	recs, _ := e.Close()
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("Put and Close took %v with the collector slow", d)
	}
	if recs == 0 {
		t.Error("nothing counted lost with a collector that never answered")
	}
	if r, _, n := s.lost(); n == 0 || r == "0" {
		t.Errorf("no loss record in the audit: %v", s.got)
	}
}

func TestResolve(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, c := range []struct {
		name    string
		cfg     config.OTLP
		env     map[string]string
		logs    string
		headers map[string]string
		err     string
	}{
		{name: "nothing configured sends nothing", env: map[string]string{}},
		{name: "a config endpoint is a base URL", cfg: config.OTLP{Endpoint: "https://otel.example.com:4318/"}, logs: "https://otel.example.com:4318/v1/logs", headers: map[string]string{}},
		{name: "a bare host is https", cfg: config.OTLP{Endpoint: "otel.example.com:4318"}, logs: "https://otel.example.com:4318/v1/logs", headers: map[string]string{}},
		{name: "a bare host with insecure is http", cfg: config.OTLP{Endpoint: "localhost:4318", Insecure: true}, logs: "http://localhost:4318/v1/logs", headers: map[string]string{}},
		{name: "http in config needs insecure", cfg: config.OTLP{Endpoint: "http://localhost:4318"}, err: "insecure"},
		{name: "user info in the URL is refused", cfg: config.OTLP{Endpoint: "https://u:p@x:4318"}, err: "headers"},
		{name: "the standard variables fill in", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20t,x-a=b"},
			logs: "http://127.0.0.1:4318/v1/logs", headers: map[string]string{"authorization": "Bearer t", "x-a": "b"}},
		{name: "the logs endpoint is a full URL", env: map[string]string{"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "https://c/custom/logs"}, logs: "https://c/custom/logs", headers: map[string]string{}},
		{name: "a config header wins", cfg: config.OTLP{Endpoint: "https://c", Headers: []string{"X-A=config"}}, env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "x-a=env"},
			logs: "https://c/v1/logs", headers: map[string]string{"x-a": "config"}},
		{name: "malformed headers are refused without their value", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "tok-s3cret"}, err: "OTEL_EXPORTER_OTLP_HEADERS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := Resolve(c.cfg, env(c.env))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("err %v, want one naming %q without the value", err, c.err)
				}
				return
			}
			if err != nil || ok != (c.logs != "") || got.LogsURL != c.logs {
				t.Fatalf("got %+v %v %v, want logs at %q", got, ok, err, c.logs)
			}
			if c.headers != nil && len(got.Headers) != len(c.headers) {
				t.Fatalf("headers %v, want %v", got.Headers, c.headers)
			}
			for k, v := range c.headers {
				if got.Headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, got.Headers[k], v)
				}
			}
		})
	}
}

// While the collector stays down, the loss is written as it goes, not only
// at the end: a run that is killed still leaves a count.
func TestTheLossIsAuditedPeriodically(t *testing.T) {
	defer func(d time.Duration) { reportEvery = d }(reportEvery)
	reportEvery = 100 * time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e, s, _ := start(t, "http://"+addr, nil)
	defer e.Close()
	e.Put(audit.Record{Time: time.Now(), Kind: audit.KindNetwork, Decision: audit.Deny, Host: "h"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r, _, n := s.lost(); n > 0 {
			if r != "1" {
				t.Errorf("the periodic loss record counts %s records, want 1", r)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no loss record while the exporter runs")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Whatever the variables hold, Resolve does not panic, an error never
// quotes a header's value, and what it accepts is an http(s) URL.
func FuzzResolve(f *testing.F) {
	f.Add("http://127.0.0.1:4318", "authorization=Bearer%20x,x-a=b", "https://c/v1/logs")
	f.Add("c:4318", "=,,a", "")
	f.Add("ftp://x", "k=v=w", "http://u:p@h")
	f.Fuzz(func(t *testing.T, endpoint, headers, logs string) {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_HEADERS": headers, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": logs}
		cfg, ok, err := Resolve(config.OTLP{}, func(k string) string { return env[k] })
		if err != nil {
			for _, v := range cfg.Headers {
				if len(v) > 3 && strings.Contains(err.Error(), v) {
					t.Fatalf("the error %q quotes a header value", err)
				}
			}
			return
		}
		for _, u := range []string{cfg.LogsURL, cfg.TracesURL} {
			if ok && u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				t.Fatalf("accepted %q", u)
			}
		}
	})
}

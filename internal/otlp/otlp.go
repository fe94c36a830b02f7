// Package otlp sends a sandbox's audit records to an OpenTelemetry collector over OTLP/HTTP: each as a log record, with spans for the run, its commands and its LLM calls.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Bounds: what waits for the collector is at most QueueSize records and
// as many spans; an export that takes longer than exportTimeout is given
// up (and its records counted as lost); Close waits at most closeTimeout.
const (
	QueueSize     = 4096
	maxBatch      = 512
	batchEvery    = time.Second
	exportTimeout = 5 * time.Second
	closeTimeout  = 2 * time.Second
)

// reportEvery is how often a loss record is written while records are lost
// (a variable for the tests).
var reportEvery = 30 * time.Second

// Config is where and how to send.
type Config struct {
	LogsURL, TracesURL string            // full URLs (…/v1/logs, …/v1/traces)
	Headers            map[string]string // sent with every export; may hold tokens
	SandboxID, Name    string            // resource attributes
}

// Resolve is the sandbox's OTLP settings from c with the host's
// OTEL_EXPORTER_OTLP_* variables (getenv) filling in what c leaves unset:
// OTEL_EXPORTER_OTLP_ENDPOINT (a base URL), OTEL_EXPORTER_OTLP_LOGS_ENDPOINT
// and _TRACES_ENDPOINT (full URLs), OTEL_EXPORTER_OTLP_HEADERS and
// _LOGS_HEADERS / _TRACES_HEADERS (name=value,…; a config header wins). ok is
// false when nothing names a collector. Errors never hold a header value.
func Resolve(c config.OTLP, getenv func(string) string) (cfg Config, ok bool, err error) {
	headers := map[string]string{}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", DetachedHeaders} {
		if err := parseHeaders(getenv(v), headers); err != nil {
			return Config{}, false, fmt.Errorf("%s: %w", v, err)
		}
	}
	for _, h := range c.Headers {
		name, value, _ := strings.Cut(h, "=")
		headers[strings.ToLower(name)] = value
	}
	cfg.Headers = headers
	if c.Endpoint != "" {
		base, err := baseURL(c.Endpoint, c.Insecure, "audit.otlp.endpoint")
		if err != nil {
			return Config{}, false, err
		}
		cfg.LogsURL, cfg.TracesURL = base+"/v1/logs", base+"/v1/traces"
		return cfg, true, nil
	}
	if e := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); e != "" {
		// The variable's scheme says http or https, as the standard has it.
		base, err := baseURL(e, true, "OTEL_EXPORTER_OTLP_ENDPOINT")
		if err != nil {
			return Config{}, false, err
		}
		cfg.LogsURL, cfg.TracesURL = base+"/v1/logs", base+"/v1/traces"
	}
	for _, s := range []struct {
		v   string
		dst *string
	}{{"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &cfg.LogsURL}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &cfg.TracesURL}} {
		if e := getenv(s.v); e != "" {
			u, err := baseURL(e, true, s.v)
			if err != nil {
				return Config{}, false, err
			}
			*s.dst = u
		}
	}
	return cfg, cfg.LogsURL != "" || cfg.TracesURL != "", nil
}

// baseURL checks an endpoint: https, or http where insecure allows it; a
// bare host:port is https (http with insecure). No user info: credentials
// go in headers, which are never shown.
func baseURL(e string, insecure bool, what string) (string, error) {
	if !strings.Contains(e, "://") {
		scheme := "https://"
		if insecure {
			scheme = "http://"
		}
		e = scheme + e
	}
	u, err := url.Parse(e)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%s: not a URL such as https://collector:4318", what)
	}
	if u.User != nil {
		return "", fmt.Errorf("%s: no user:password in the URL; put credentials in audit.otlp.headers", what)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !insecure {
			return "", fmt.Errorf("%s: http:// sends the audit in the clear: use https://, or set audit.otlp.insecure: true", what)
		}
	default:
		return "", fmt.Errorf("%s: scheme %q: use https:// (or http:// with audit.otlp.insecure: true)", what, u.Scheme)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// DetachedHeaders carries the config's headers to a detached sandbox's
// supervisor (on the host), since the spec it reads never holds them.
const DetachedHeaders = "AIRLOCK_OTLP_HEADERS"

// EncodeHeaders is headers (NAME=VALUE) in the standard's name=value,… form.
func EncodeHeaders(headers []string) string {
	var parts []string
	for _, h := range headers {
		name, value, _ := strings.Cut(h, "=")
		parts = append(parts, name+"="+url.PathEscape(value))
	}
	return strings.Join(parts, ",")
}

// parseHeaders reads the standard's name=value,name=value (values
// URL-encoded) into into.
func parseHeaders(s string, into map[string]string) error {
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		name, value, ok := strings.Cut(kv, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return errors.New("expected name=value,name=value")
		}
		if v, err := url.PathUnescape(strings.TrimSpace(value)); err == nil {
			value = v
		}
		into[strings.ToLower(name)] = value
	}
	return nil
}

// Exporter is an audit.Sink that sends what the Log writes. Put never
// blocks: a record that finds the queue full is dropped and counted, and
// so are the records of an export that failed or timed out.
type Exporter struct {
	q      chan audit.Record
	ctx    context.Context // every export's; Close cancels it at its deadline
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool

	logs    *poster
	logger  log.Logger
	batch   []sdklog.Record // filled by collect while the worker emits
	tp      *sdktrace.TracerProvider
	tracer  trace.Tracer
	run     trace.Span
	runCtx  context.Context
	started time.Time

	lostRecs   atomic.Uint64 // queue full or export failed
	endedSpans atomic.Uint64
	sentSpans  atomic.Uint64
	mu         sync.Mutex
	lastErr    string // the last failure, without header values
	reported   [2]uint64
	warnOnce   sync.Once
	warn       func(string)
	record     func(audit.Record)
}

// New starts an exporter. warn hears, once, that the collector cannot be
// reached; record writes the loss records into the audit (periodically
// and at Close). Nothing is sent before the first record.
func New(c Config, warn func(string), record func(audit.Record)) (*Exporter, error) {
	e := &Exporter{q: make(chan audit.Record, QueueSize), stop: make(chan struct{}), done: make(chan struct{}),
		warn: warn, record: record, started: time.Now()}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	quietSDK()
	res := resource.NewSchemaless(attribute.String("service.name", "airlock"),
		attribute.String("airlock.sandbox.id", c.SandboxID), attribute.String("airlock.sandbox.name", c.Name))
	ctx := context.Background()
	// A failed batch is counted, not retried while more queue up.
	if c.LogsURL != "" {
		e.logs = newPoster(c.LogsURL, c.Headers)
		lp := sdklog.NewLoggerProvider(sdklog.WithResource(res), sdklog.WithProcessor(collect{e}))
		e.logger = lp.Logger("airlock/audit")
	}
	if c.TracesURL != "" {
		e.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res),
			sdktrace.WithBatcher(spanExporter{newPoster(c.TracesURL, c.Headers), e}, sdktrace.WithMaxQueueSize(QueueSize), sdktrace.WithMaxExportBatchSize(maxBatch),
				sdktrace.WithBatchTimeout(batchEvery), sdktrace.WithExportTimeout(exportTimeout)))
		e.tracer = e.tp.Tracer("airlock/audit")
	} else {
		e.tracer = noop.NewTracerProvider().Tracer("")
	}
	e.runCtx, e.run = e.tracer.Start(ctx, "airlock.run", trace.WithTimestamp(e.started),
		trace.WithAttributes(attribute.String("airlock.sandbox.id", c.SandboxID)))
	go e.loop()
	return e, nil
}

// quietSDK keeps the SDK's own error reports (which go to the standard
// logger, process-wide) off the user's terminal: each exporter sees its
// failures itself (spanExporter, send) and says them once, with the loss.
var quietSDK = sync.OnceFunc(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })

// Put queues r, or counts it lost when the queue is full. It never blocks.
func (e *Exporter) Put(r audit.Record) {
	if e.closed.Load() {
		return
	}
	select {
	case e.q <- r:
	default:
		e.lostRecs.Add(1)
	}
}

func (e *Exporter) loop() {
	defer close(e.done)
	tick := time.NewTicker(batchEvery)
	defer tick.Stop()
	lastReport := time.Now()
	var pending []audit.Record
	for {
		select {
		case r := <-e.q:
			pending = append(pending, r)
			if len(pending) < maxBatch {
				continue
			}
		case <-tick.C:
			if time.Since(lastReport) >= reportEvery {
				lastReport = time.Now()
				e.report()
			}
		case <-e.stop:
			for {
				select {
				case r := <-e.q:
					pending = append(pending, r)
					continue
				default:
				}
				break
			}
			ctx, cancel := context.WithTimeout(e.ctx, closeTimeout)
			for len(pending) > 0 {
				n := min(len(pending), maxBatch)
				e.send(ctx, pending[:n])
				pending = pending[n:]
			}
			cancel()
			return
		}
		if len(pending) > 0 {
			ctx, cancel := context.WithTimeout(e.ctx, exportTimeout)
			e.send(ctx, pending)
			cancel()
			pending = pending[:0]
		}
	}
}

// send turns records into log records (and spans) and exports them.
func (e *Exporter) send(ctx context.Context, rs []audit.Record) {
	for _, r := range rs {
		e.span(r)
		if e.logger != nil {
			e.logger.Emit(e.runCtx, logRecord(r))
		}
	}
	if e.logs == nil || len(e.batch) == 0 {
		return
	}
	b := e.batch
	e.batch = e.batch[:0]
	if ctx.Err() != nil {
		e.lostRecs.Add(uint64(len(b)))
		return
	}
	if err := e.logs.post(ctx, encodeLogs(b)); err != nil {
		e.lostRecs.Add(uint64(len(b)))
		e.failed(err)
	}
}

// span makes the spans a record stands for: a command that ended, an LLM call.
func (e *Exporter) span(r audit.Record) {
	if e.tp == nil {
		return
	}
	var name string
	var attrs []attribute.KeyValue
	switch {
	case r.Kind == audit.KindExec && r.ExitCode != nil:
		name = "airlock.exec"
		attrs = append(attrs, attribute.StringSlice("process.command_args", r.Argv), attribute.Int("process.exit.code", *r.ExitCode))
	case r.Kind == audit.KindLLM:
		name = "airlock.llm"
		attrs = append(attrs, attribute.String("gen_ai.request.model", r.Subject), attribute.String("gen_ai.system", r.Extra["api"]),
			attribute.String("server.address", r.Host), attribute.Int("http.response.status_code", r.Status),
			attribute.String("airlock.decision", r.Decision))
		for k, key := range map[string]string{"input": "gen_ai.usage.input_tokens", "output": "gen_ai.usage.output_tokens",
			"cache_read": "airlock.llm.cache_read_tokens", "cache_write": "airlock.llm.cache_write_tokens", "tokens": "airlock.llm.tokens"} {
			if n, err := strconv.ParseInt(r.Extra[k], 10, 64); err == nil {
				attrs = append(attrs, attribute.Int64(key, n))
			}
		}
		if usd, err := strconv.ParseFloat(r.Extra["usd"], 64); err == nil {
			attrs = append(attrs, attribute.Float64("airlock.llm.usd", usd))
		}
	default:
		return
	}
	end := r.Time
	_, s := e.tracer.Start(e.runCtx, name, trace.WithTimestamp(end.Add(-r.Duration.Duration())), trace.WithAttributes(attrs...))
	s.End(trace.WithTimestamp(end))
	e.endedSpans.Add(1)
}

// failed notes an export's failure: one line the first time, the loss in the audit.
func (e *Exporter) failed(err error) {
	msg := err.Error()
	e.mu.Lock()
	e.lastErr = msg
	e.mu.Unlock()
	e.warnOnce.Do(func() {
		if e.warn != nil {
			e.warn("otlp: the collector did not take the audit records (" + msg + "); the run goes on, and what is lost is counted in the audit")
		}
	})
}

// report writes a loss record if records or spans were lost since the last one.
func (e *Exporter) report() {
	recs, spans := e.lostRecs.Load(), e.lostSpans()
	e.mu.Lock()
	dr, ds := recs-e.reported[0], spans-e.reported[1]
	e.reported = [2]uint64{recs, spans}
	reason := e.lastErr
	e.mu.Unlock()
	if (dr == 0 && ds == 0) || e.record == nil {
		return
	}
	if reason == "" {
		reason = "the queue was full"
	}
	e.record(audit.Record{Kind: audit.KindAudit, Decision: audit.DecisionLost, Subject: "otlp", Reason: reason,
		Extra: map[string]string{"records": strconv.FormatUint(dr, 10), "spans": strconv.FormatUint(ds, 10)}})
}

// lostSpans: spans ended but not (yet) taken by the collector.
func (e *Exporter) lostSpans() uint64 {
	if !e.closed.Load() {
		return 0 // in flight until the end
	}
	return e.endedSpans.Load() - min(e.sentSpans.Load(), e.endedSpans.Load())
}

// Close ends the run's span, sends what is queued (waiting at most a few
// seconds), and writes the loss record. It returns the records and spans lost.
func (e *Exporter) Close() (records, spans uint64) {
	if e.closed.Swap(true) {
		return e.lostRecs.Load(), e.lostSpans()
	}
	// One deadline for it all: what is queued, then the spans; an export
	// still running then is cut off, and its records counted.
	deadline := time.Now().Add(closeTimeout)
	close(e.stop)
	select {
	case <-e.done:
	case <-time.After(time.Until(deadline)):
		e.cancel()
		<-e.done // a canceled request returns at once
	}
	if e.tp != nil {
		e.run.End()
		e.endedSpans.Add(1)
		end := deadline
		if soon := time.Now().Add(500 * time.Millisecond); soon.After(end) {
			end = soon // the spans get a moment even when the records took it all
		}
		ctx, cancel := context.WithDeadline(e.ctx, end)
		e.tp.Shutdown(ctx)
		cancel()
	}
	e.cancel()
	if e.logs != nil {
		e.logs.close()
	}
	e.report()
	return e.lostRecs.Load(), e.lostSpans()
}

// collect is the log SDK's processor: the worker's Emit lands in its batch.
type collect struct{ e *Exporter }

func (c collect) OnEmit(_ context.Context, r *sdklog.Record) error {
	c.e.batch = append(c.e.batch, r.Clone())
	return nil
}
func (collect) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (collect) Shutdown(context.Context) error                         { return nil }
func (collect) ForceFlush(context.Context) error                       { return nil }

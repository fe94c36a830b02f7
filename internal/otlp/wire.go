package otlp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The OTLP/HTTP protobuf encoding, written out here: the official
// exporters link gRPC (their config and the collector packages import it),
// 13 MB more binary and ~1.5 ms and 180 KB of package inits that every
// airlock start would pay, with OTLP or without. The field numbers are
// opentelemetry-proto's (common/v1, resource/v1, logs/v1, trace/v1); the
// tests decode what this writes with the official generated types.

type pb struct{ b []byte }

func (p *pb) tag(field, wire int) { p.uvarint(uint64(field)<<3 | uint64(wire)) }
func (p *pb) uvarint(v uint64)    { p.b = binary.AppendUvarint(p.b, v) }
func (p *pb) bytes(field int, b []byte) {
	p.tag(field, 2)
	p.uvarint(uint64(len(b)))
	p.b = append(p.b, b...)
}
func (p *pb) str(field int, s string) {
	if s != "" {
		p.tag(field, 2)
		p.uvarint(uint64(len(s)))
		p.b = append(p.b, s...)
	}
}
func (p *pb) varint(field int, v uint64) {
	if v != 0 {
		p.tag(field, 0)
		p.uvarint(v)
	}
}
func (p *pb) fixed64(field int, v uint64) {
	if v != 0 {
		p.tag(field, 1)
		p.b = binary.LittleEndian.AppendUint64(p.b, v)
	}
}
func (p *pb) fixed32(field int, v uint32) {
	if v != 0 {
		p.tag(field, 5)
		p.b = binary.LittleEndian.AppendUint32(p.b, v)
	}
}

// msg writes a length-delimited sub-message built by f.
func (p *pb) msg(field int, f func(*pb)) {
	var sub pb
	f(&sub)
	p.bytes(field, sub.b)
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

// anyValue is common.v1.AnyValue.
func anyValue(p *pb, v attribute.Value) {
	switch v.Type() {
	case attribute.BOOL:
		p.tag(2, 0)
		if v.AsBool() {
			p.uvarint(1)
		} else {
			p.uvarint(0)
		}
	case attribute.INT64:
		p.tag(3, 0)
		p.uvarint(uint64(v.AsInt64()))
	case attribute.FLOAT64:
		p.tag(4, 1)
		p.b = binary.LittleEndian.AppendUint64(p.b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		p.tag(1, 2) // written even when empty: the value is a string
		p.uvarint(uint64(len(v.AsString())))
		p.b = append(p.b, v.AsString()...)
	case attribute.STRINGSLICE:
		p.msg(5, func(a *pb) {
			for _, s := range v.AsStringSlice() {
				a.msg(1, func(e *pb) { anyValue(e, attribute.StringValue(s)) })
			}
		})
	case attribute.INT64SLICE:
		p.msg(5, func(a *pb) {
			for _, i := range v.AsInt64Slice() {
				a.msg(1, func(e *pb) { anyValue(e, attribute.Int64Value(i)) })
			}
		})
	default:
		p.tag(1, 2)
		s := v.Emit()
		p.uvarint(uint64(len(s)))
		p.b = append(p.b, s...)
	}
}

// keyValues writes common.v1.KeyValue entries at field.
func keyValues(p *pb, field int, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		p.msg(field, func(m *pb) {
			m.str(1, string(kv.Key))
			m.msg(2, func(v *pb) { anyValue(v, kv.Value) })
		})
	}
}

func resourceMsg(p *pb, res *resource.Resource) {
	if res != nil {
		p.msg(1, func(r *pb) { keyValues(r, 1, res.Attributes()) })
	}
}

// encodeLogs is a collector.logs.v1.ExportLogsServiceRequest of rs, which
// come from one logger: one resource, one scope.
func encodeLogs(rs []sdklog.Record) []byte {
	var p pb
	if len(rs) == 0 {
		return nil
	}
	res, scope := rs[0].Resource(), rs[0].InstrumentationScope()
	p.msg(1, func(rl *pb) { // ResourceLogs
		resourceMsg(rl, res)
		rl.msg(2, func(sl *pb) { // ScopeLogs
			sl.msg(1, func(s *pb) { s.str(1, scope.Name); s.str(2, scope.Version) })
			for i := range rs {
				r := &rs[i]
				sl.msg(2, func(l *pb) { // LogRecord
					l.fixed64(1, unixNano(r.Timestamp()))
					l.varint(2, uint64(r.Severity()))
					l.str(3, r.SeverityText())
					if b := r.Body(); b.Type() != attribute.EMPTY {
						l.msg(5, func(v *pb) { anyValue(v, b) })
					}
					var kvs []attribute.KeyValue
					r.WalkAttributes(func(kv attribute.KeyValue) bool { kvs = append(kvs, kv); return true })
					keyValues(l, 6, kvs)
					l.varint(7, uint64(r.DroppedAttributes()))
					l.fixed32(8, uint32(r.TraceFlags()))
					if id := r.TraceID(); id.IsValid() {
						l.bytes(9, id[:])
					}
					if id := r.SpanID(); id.IsValid() {
						l.bytes(10, id[:])
					}
					l.fixed64(11, unixNano(r.ObservedTimestamp()))
					l.str(12, r.EventName())
				})
			}
		})
	})
	return p.b
}

// encodeSpans is a collector.trace.v1.ExportTraceServiceRequest of spans
// (one tracer provider: one resource; spans grouped by scope as they come).
func encodeSpans(spans []sdktrace.ReadOnlySpan) []byte {
	var p pb
	if len(spans) == 0 {
		return nil
	}
	p.msg(1, func(rsp *pb) { // ResourceSpans
		resourceMsg(rsp, spans[0].Resource())
		rsp.msg(2, func(ss *pb) { // ScopeSpans
			sc := spans[0].InstrumentationScope()
			ss.msg(1, func(s *pb) { s.str(1, sc.Name); s.str(2, sc.Version) })
			for _, sp := range spans {
				ss.msg(2, func(s *pb) { // Span
					sc := sp.SpanContext()
					tid, sid := sc.TraceID(), sc.SpanID()
					s.bytes(1, tid[:])
					s.bytes(2, sid[:])
					if par := sp.Parent(); par.SpanID().IsValid() {
						psid := par.SpanID()
						s.bytes(4, psid[:])
					}
					s.str(5, sp.Name())
					s.varint(6, uint64(sp.SpanKind())) // the SDK's kinds are OTLP's
					s.fixed64(7, unixNano(sp.StartTime()))
					s.fixed64(8, unixNano(sp.EndTime()))
					keyValues(s, 9, sp.Attributes())
					s.varint(10, uint64(sp.DroppedAttributes()))
					if st := sp.Status(); st.Code != 0 {
						s.msg(15, func(m *pb) { m.str(2, st.Description); m.varint(3, uint64(st.Code)) })
					}
					s.fixed32(16, uint32(sc.TraceFlags())|0x100) // the parent's remoteness is known: local
				})
			}
		})
	})
	return p.b
}

// poster sends OTLP/HTTP protobuf requests to one URL.
type poster struct {
	url     string
	headers map[string]string
	client  *http.Client
}

func newPoster(url string, headers map[string]string) *poster {
	// The host's proxy settings apply; TLS verifies against the system roots.
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second, ResponseHeaderTimeout: exportTimeout}
	return &poster{url: url, headers: headers, client: &http.Client{Transport: tr, Timeout: exportTimeout}}
}

// post sends body; an error never holds a header's value.
func (p *poster) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("post %s: %w", p.url, err)
	}
	for k, v := range p.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := p.client.Do(req)
	if err != nil {
		return err // Post "URL": what failed
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // a partial-success answer; bounded
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post %s: the collector answered %s", p.url, resp.Status)
	}
	return nil
}

func (p *poster) close() { p.client.CloseIdleConnections() }

// spanExporter is the trace SDK's exporter over poster.
type spanExporter struct {
	p *poster
	e *Exporter
}

func (s spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := s.p.post(ctx, encodeSpans(spans)); err != nil {
		s.e.failed(err)
		return err
	}
	s.e.sentSpans.Add(uint64(len(spans)))
	return nil
}

func (s spanExporter) Shutdown(context.Context) error { s.p.close(); return nil }

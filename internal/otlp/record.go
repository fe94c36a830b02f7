package otlp

import (
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
)

// logRecord is r as an OTLP log record: the event name airlock.KIND, a
// one-line body, a severity from the decision, and every field that is set
// as an attribute named airlock.FIELD (the audit file's JSON names;
// Extra's keys as airlock.extra.KEY).
func logRecord(r audit.Record) log.Record {
	var l log.Record
	l.SetTimestamp(r.Time)
	l.SetObservedTimestamp(time.Now())
	l.SetEventName("airlock." + r.Kind)
	l.SetBody(attribute.StringValue(audit.Format(r, false)))
	l.SetSeverity(log.SeverityInfo)
	switch r.Decision {
	case audit.Deny, audit.SecretBlocked, audit.Error, audit.DecisionLost:
		l.SetSeverity(log.SeverityWarn)
	}
	l.SetSeverityText(r.Decision)
	var kv []attribute.KeyValue
	str := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String("airlock."+k, v))
		}
	}
	num := func(k string, v int64) {
		if v != 0 {
			kv = append(kv, attribute.Int64("airlock."+k, v))
		}
	}
	str("sandbox", r.Sandbox)
	str("kind", r.Kind)
	str("subject", r.Subject)
	str("decision", r.Decision)
	str("rule", r.Rule)
	str("reason", r.Reason)
	str("host", r.Host)
	str("ip", r.IP)
	num("port", int64(r.Port))
	str("method", r.Method)
	str("path", r.Path)
	num("status", int64(r.Status))
	num("bytes_out", r.BytesOut)
	num("bytes_in", r.BytesIn)
	if r.Duration != 0 {
		kv = append(kv, attribute.Float64("airlock.duration_ms", float64(r.Duration)/1e6))
	}
	str("op", r.Op)
	if len(r.Argv) > 0 {
		kv = append(kv, attribute.StringSlice("airlock.argv", r.Argv))
	}
	if r.ExitCode != nil {
		kv = append(kv, attribute.Int("airlock.exit_code", *r.ExitCode))
	}
	str("backend", r.Backend)
	num("added", int64(r.Added))
	num("modified", int64(r.Modified))
	num("deleted", int64(r.Deleted))
	num("count", int64(r.Count))
	if !r.Since.IsZero() {
		str("since", r.Since.UTC().Format(time.RFC3339Nano))
	}
	num("distinct", int64(r.Distinct))
	for k, v := range r.Extra {
		str("extra."+k, v)
	}
	l.AddAttributes(kv...)
	return l
}

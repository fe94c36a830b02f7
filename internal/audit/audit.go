// Package audit records what a sandbox did, one JSON line per decision or action, and reads it back.
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Record is one decision or action of a sandbox.
type Record struct {
	Time     time.Time         `json:"time"`
	Sandbox  string            `json:"sandbox"`
	Kind     string            `json:"kind"`               // network, dns, http, exec, file, approval, mcp, hostexec, workspace
	Subject  string            `json:"subject,omitempty"`  // host, path, command...
	Decision string            `json:"decision,omitempty"` // allow, deny, ask, error, secret_blocked ...
	Rule     string            `json:"rule,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Host     string            `json:"host,omitempty"`
	IP       string            `json:"ip,omitempty"`
	Port     int               `json:"port,omitempty"`
	Method   string            `json:"method,omitempty"`
	Path     string            `json:"path,omitempty"`
	Status   int               `json:"status,omitempty"`
	BytesOut int64             `json:"bytes_out,omitempty"`
	BytesIn  int64             `json:"bytes_in,omitempty"`
	Duration Millis            `json:"duration_ms,omitempty"` // float milliseconds in JSON
	Extra    map[string]string `json:"extra,omitempty"`
}

// Millis is a duration that appears in JSON as float milliseconds, which is what
// people and jq scripts reading the log expect rather than Go's nanosecond integers.
type Millis time.Duration

// Duration returns m as a time.Duration.
func (m Millis) Duration() time.Duration { return time.Duration(m) }

// MarshalJSON encodes m as milliseconds, keeping sub-millisecond precision.
func (m Millis) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(m)/1e6, 'f', -1, 64), nil
}

// UnmarshalJSON decodes milliseconds, rejecting values no Duration can hold.
func (m *Millis) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	ns := math.Round(f * 1e6)
	if math.IsNaN(ns) || ns >= math.MaxInt64 || ns <= math.MinInt64 {
		return fmt.Errorf("duration_ms %v out of range", f)
	}
	*m = Millis(ns)
	return nil
}

const (
	// MaxLine bounds one encoded record, newline included. It keeps every record a
	// single modest write(2) and far below what Read accepts (maxReadLine).
	MaxLine = 64 << 10

	truncMarker = "…[truncated %d bytes]"
)

// fieldCaps are the per-string limits tried in turn until a record fits MaxLine; the
// first is generous so ordinary commands and paths are kept whole.
var fieldCaps = []int{8 << 10, 1 << 10, 128}

// Log appends records to one file and fans them out to live subscribers.
type Log struct {
	sandbox string
	redact  func(string) string

	mu      sync.Mutex // serializes writes so lines and subscriber order match the file
	f       *os.File
	needNL  bool // the file ended in a torn line (a crash mid-write): start on a fresh line
	closed  bool
	subs    map[*sub]struct{}
	dropped atomic.Uint64
}

type sub struct{ ch chan Record }

// Open appends to path (created 0600). Writes are serialized, each record one write(2)
// of one line (so concurrent writers from other processes using O_APPEND never
// interleave), bounded line length (truncate long fields with a marker rather than
// fail), and Redact (if set) is applied to every string field before encoding.
func Open(path, sandboxID string, redact func(string) string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open log: %w", err)
	}
	l := &Log{sandbox: sandboxID, redact: redact, f: f, subs: map[*sub]struct{}{}}
	// A previous writer killed mid-write leaves a partial line; appending straight
	// after it would corrupt our first record too, so that record starts a new line.
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		if r, err := os.Open(path); err == nil {
			var last [1]byte
			if _, err := r.ReadAt(last[:], fi.Size()-1); err == nil && last[0] != '\n' {
				l.needNL = true
			}
			r.Close()
		}
	}
	return l, nil
}

// Write appends r, filling Time and Sandbox if empty, and passes the record as
// written (redacted, truncated) to subscribers, so events never carry more than the file.
func (l *Log) Write(r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	if r.Sandbox == "" {
		r.Sandbox = l.sandbox
	}
	r = applyRedact(r, l.redact)
	r, line, err := encode(r)
	if err != nil {
		return fmt.Errorf("audit: encode %s record: %w", r.Kind, err)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("audit: write: %w", os.ErrClosed)
	}
	if l.needNL {
		line = append([]byte{'\n'}, line...)
	}
	_, werr := l.f.Write(line)
	if werr == nil {
		l.needNL = false
	}
	// Live observers still learn what the sandbox did when the disk is full.
	for s := range l.subs {
		select {
		case s.ch <- r:
		default:
			l.dropped.Add(1)
		}
	}
	if werr != nil {
		return fmt.Errorf("audit: write: %w", werr)
	}
	return nil
}

// Subscribe returns live records for JSON-RPC events and a cancel function. A
// subscriber whose buffer is full misses records (counted by Dropped) rather than
// blocking writers: the sandbox must never stall on a slow client. The channel is
// closed by cancel or Close.
func (l *Log) Subscribe(buf int) (<-chan Record, func()) {
	s := &sub{ch: make(chan Record, max(buf, 0))}
	l.mu.Lock()
	if l.closed {
		close(s.ch)
	} else {
		l.subs[s] = struct{}{}
	}
	l.mu.Unlock()
	return s.ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.subs[s]; ok {
			delete(l.subs, s)
			close(s.ch)
		}
	}
}

// Dropped reports how many records subscribers have missed because they lagged.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Close closes the file and every subscriber channel; later writes fail.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	for s := range l.subs {
		delete(l.subs, s)
		close(s.ch)
	}
	return l.f.Close()
}

// applyRedact runs redact over every string, Extra keys included (a key can be
// built from a header name carrying a token), and copies Extra so the caller's map
// is neither changed nor shared with subscribers.
func applyRedact(r Record, redact func(string) string) Record {
	if redact == nil {
		redact = func(s string) string { return s }
	}
	for _, p := range stringFields(&r) {
		*p = redact(*p)
	}
	if r.Extra != nil {
		extra := make(map[string]string, len(r.Extra))
		for k, v := range r.Extra {
			extra[redact(k)] = redact(v)
		}
		r.Extra = extra
	}
	return r
}

func stringFields(r *Record) []*string {
	return []*string{&r.Sandbox, &r.Kind, &r.Subject, &r.Decision, &r.Rule, &r.Reason,
		&r.Host, &r.IP, &r.Method, &r.Path}
}

// encode returns r as one newline-terminated line of at most MaxLine bytes, with
// fields cut ever shorter (and, as a last resort, Extra dropped) until it fits, since
// losing the tail of a field is better than losing the record.
func encode(r Record) (Record, []byte, error) {
	for _, c := range fieldCaps {
		t := truncateFields(r, c)
		line, err := marshal(t)
		if err != nil || len(line) <= MaxLine {
			return t, line, err
		}
	}
	t := truncateFields(r, fieldCaps[len(fieldCaps)-1])
	if len(t.Extra) > 0 {
		t.Extra = map[string]string{"truncated": fmt.Sprintf("%d extra fields dropped", len(t.Extra))}
	}
	line, err := marshal(t)
	if err == nil && len(line) > MaxLine { // unreachable with the caps above; never write an oversized line
		err = errors.New("record too long")
	}
	return t, line, err
}

func truncateFields(r Record, n int) Record {
	for _, p := range stringFields(&r) {
		*p = truncate(*p, n)
	}
	if r.Extra != nil {
		extra := make(map[string]string, len(r.Extra))
		for k, v := range r.Extra {
			extra[truncate(k, n)] = truncate(v, n)
		}
		r.Extra = extra
	}
	return r
}

// truncate cuts s to at most n bytes on a rune boundary and says how much was lost.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(truncMarker, len(s)-cut)
}

func marshal(r Record) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false) // keep URLs and commands readable with grep; this is not HTML
	if err := e.Encode(r); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Package audit records what a sandbox did, one JSON line per decision or action, and
// reads it back. A Log is bounded against a sandbox that floods it (see Options).
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Record is one decision or action of a sandbox. Kinds and the fields each uses are
// listed in kinds.go; Count, Since and Distinct are filled by the Log itself when it
// aggregates repeats or suppresses a flood (see Options).
type Record struct {
	Time     time.Time         `json:"time"`
	Sandbox  string            `json:"sandbox"`
	Kind     string            `json:"kind"`               // network, dns, http, exec, file, workspace, lifecycle, audit, approval, mcp, hostexec
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
	Op       string            `json:"op,omitempty"`          // file: create, write, remove...; workspace: review, apply, discard; lifecycle: create, start, stop, crash
	Argv     []string          `json:"argv,omitempty"`        // exec: the command line
	ExitCode *int              `json:"exit_code,omitempty"`   // exec: set once the command has ended
	Backend  string            `json:"backend,omitempty"`     // lifecycle: native, docker...
	Added    int               `json:"added,omitempty"`       // workspace: files added, modified, deleted
	Modified int               `json:"modified,omitempty"`
	Deleted  int               `json:"deleted,omitempty"`
	Count    int               `json:"count,omitempty"`    // this line stands for Count records (absent: one); see Options
	Since    time.Time         `json:"since,omitzero"`     // with Count: when the first of them happened
	Distinct int               `json:"distinct,omitempty"` // audit suppressed: how many different records Count covers
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

// Options bound what a Log writes against a sandbox that floods it. The zero value
// means the defaults; a negative value turns that bound off.
//
// Within each Interval, records of the kinds that repeat (dns, network, http and file,
// unless they carry a result of their own: bytes moved or an exit code) are aggregated:
// the first record of each content (everything but time and duration) is written at
// once, later copies are counted and written as one record with Count and Since when
// the interval ends, on Flush, or on Close. Every other record is written as it is.
// Per kind and decision, at most MaxKeys records (first copies and exact records
// together) are written one by one per interval; the rest are counted into one record
// of kind audit, decision suppressed, per kind and decision per interval. The first
// secret_blocked record toward each host is written even past that cap (for the
// first maxFirstSeen hosts of the log's life).
//
// The file is rotated when a line would take it past MaxBytes: path becomes path.1
// (path.1 becomes path.2 and so on, path.Keep is removed), a new path is started, and
// its first record (kind audit, decision rotated) says what was removed.
type Options struct {
	MaxBytes int64         // size that triggers rotation; default 10 MiB
	Keep     int           // rotated files kept besides path (path.1 … path.Keep); default 3
	Interval time.Duration // aggregation window; default 1s; negative: write every record, no cap
	MaxKeys  int           // records written one by one per kind and decision per Interval; default 200
}

// Defaults for a zero Options: at most (Keep+1) × MaxBytes = 40 MiB on disk per log,
// and per kind and decision at most 2×MaxKeys+1 lines a second.
const (
	DefaultMaxBytes = 10 << 20
	DefaultKeep     = 3
	DefaultInterval = time.Second
	DefaultMaxKeys  = 200
)

func (o Options) withDefaults() Options {
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	if o.Keep < 0 {
		o.Keep = 0
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	return o
}

// Log appends records to one file and fans them out to live subscribers.
type Log struct {
	sandbox string
	redact  func(string) string
	path    string
	opt     Options
	seed    maphash.Seed

	mu        sync.Mutex // serializes writes so lines and subscriber order match the file
	f         *os.File
	needNL    bool // the file ended in a torn line (a crash mid-write): start on a fresh line
	closed    bool
	subs      map[*sub]struct{}
	win       window              // this interval's aggregation (limit.go)
	armed     bool                // a timer will flush win
	timer     *time.Timer         // the timer that will, stopped by Close
	firstSeen map[uint64]struct{} // (kind, host) that had a secret_blocked record written
	dropped   atomic.Uint64
	sinks     []Sink
}

// Sink receives every record as written (redacted, truncated, aggregated),
// under the Log's lock: Put must not block nor write to the Log (an
// exporter queues the record and drops it when its queue is full).
type Sink interface{ Put(Record) }

// AddSink passes every record written from now on to s as well.
func (l *Log) AddSink(s Sink) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sinks = append(l.sinks, s)
}

type sub struct{ ch chan Record }

// Open is OpenWith with the default Options.
func Open(path, sandboxID string, redact func(string) string) (*Log, error) {
	return OpenWith(path, sandboxID, redact, Options{})
}

// OpenWith appends to path (created 0600), bounded by o. Writes are serialized, each
// record one write(2) of one line of at most MaxLine bytes (long fields are truncated
// with a marker rather than fail), and redact (if set) is applied to every string field
// before encoding.
//
// Other processes may append to the same path with their own Log: lines never
// interleave (O_APPEND, one write each); rotations are serialized with flock on the
// file being rotated, and a Log whose file was rotated away by another process
// notices before its next write and reopens path. A line written by one process while
// another rotates may land at the end of the just-rotated file instead of the new one.
func OpenWith(path, sandboxID string, redact func(string) string, o Options) (*Log, error) {
	f, needNL, err := openFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: open log: %w", err)
	}
	return &Log{sandbox: sandboxID, redact: redact, path: path, opt: o.withDefaults(), seed: maphash.MakeSeed(),
		f: f, needNL: needNL, subs: map[*sub]struct{}{}, firstSeen: map[uint64]struct{}{}}, nil
}

// Write appends r, filling Time and Sandbox if empty, and passes the record as
// written (redacted, truncated) to subscribers, so events never carry more than the
// file. A repeat or a record over the cap is counted instead (see Options): Write
// returns nil for it, and it reaches the file and subscribers inside a later record.
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
	var k key
	if l.opt.Interval > 0 {
		k = l.keyOf(r) // hashing outside the lock: writers contend only for the file
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("audit: write: %w", os.ErrClosed)
	}
	if l.opt.Interval > 0 && !l.admit(r, k, time.Now()) {
		return nil
	}
	return l.emit(r, line)
}

// emit writes one encoded record and passes it to subscribers. l.mu is held.
func (l *Log) emit(r Record, line []byte) error {
	werr := l.writeLine(line)
	// Live observers still learn what the sandbox did when the disk is full.
	l.publish(r)
	if werr != nil {
		return fmt.Errorf("audit: write: %w", werr)
	}
	return nil
}

func (l *Log) publish(r Record) {
	for _, s := range l.sinks {
		s.Put(r)
	}
	for s := range l.subs {
		select {
		case s.ch <- r:
		default:
			l.dropped.Add(1)
		}
	}
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

// Flush writes what the current interval has counted (repeats and suppressed
// records) now rather than when the interval ends, and starts a new interval.
func (l *Log) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("audit: flush: %w", os.ErrClosed)
	}
	return l.flush(time.Now())
}

// Close writes what is still counted, then closes the file and every subscriber
// channel; later writes fail.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	ferr := l.flush(time.Now())
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
	}
	for s := range l.subs {
		delete(l.subs, s)
		close(s.ch)
	}
	return errors.Join(ferr, l.f.Close())
}

// applyRedact runs redact over every string, Extra keys included (a key can be
// built from a header name carrying a token), and copies Extra so the caller's map
// and Argv are neither changed nor shared with subscribers.
func applyRedact(r Record, redact func(string) string) Record {
	if redact == nil {
		redact = func(s string) string { return s }
	}
	for _, p := range stringFields(&r) {
		*p = redact(*p)
	}
	if r.Argv != nil {
		argv := make([]string, len(r.Argv))
		for i, a := range r.Argv {
			argv[i] = redact(a)
		}
		r.Argv = argv
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
		&r.Host, &r.IP, &r.Method, &r.Path, &r.Op, &r.Backend}
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
	r.Argv = truncateArgv(r.Argv, n)
	if r.Extra != nil {
		extra := make(map[string]string, len(r.Extra))
		for k, v := range r.Extra {
			extra[truncate(k, n)] = truncate(v, n)
		}
		r.Extra = extra
	}
	return r
}

// truncateArgv cuts each argument to n bytes and keeps arguments while they total at
// most 4n bytes (counting JSON's quotes and commas), ending with a marker saying how many were left out, so a command line
// of any length encodes to a bounded line.
func truncateArgv(argv []string, n int) []string {
	if argv == nil {
		return nil
	}
	out := make([]string, 0, min(len(argv), 64))
	total := 0
	for i, a := range argv {
		a = truncate(a, n)
		cost := len(a) + 3 // quotes and comma: a million empty arguments are not free
		if total+cost > 4*n {
			return append(out, fmt.Sprintf("…[%d more arguments]", len(argv)-i))
		}
		total += cost
		out = append(out, a)
	}
	return out
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

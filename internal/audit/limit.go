package audit

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"time"
)

const (
	// maxDistinct bounds the set used to count distinct suppressed records per kind and
	// decision per interval (8 bytes a key); beyond it the count is a lower bound.
	maxDistinct = 1 << 16
	// maxFirstSeen bounds, for the log's life, the hosts whose first secret_blocked
	// record is written past the cap.
	maxFirstSeen = 1024
)

// key is what the limiter needs to know of a record, computed before taking the lock.
type key struct {
	class   string // kind and decision: each has its own cap
	content uint64 // hash of everything but time, duration and the Log's own fields
	host    uint64 // hash of kind and host (or subject): for the first secret_blocked per host
	agg     bool   // repeats of this record may be merged
}

// window is one interval's accounting.
type window struct {
	start   time.Time          // zero: no interval open
	seen    map[uint64]*repeat // aggregatable records written this interval, by content
	repeats []*repeat          // those with repeats, in the order the first repeat came
	classes map[string]*class  // by kind and decision
	over    []*class           // those with suppressed records, in the order it began
}

// repeat counts copies of a record already written this interval.
type repeat struct {
	rec   Record // the latest copy
	n     int
	since time.Time
}

// class accounts for one kind and decision.
type class struct {
	kind, decision    string
	written           int // records written one by one this interval
	suppressed        int
	distinct          map[uint64]struct{}
	bytesIn, bytesOut int64
	since             time.Time
}

// aggregatable reports whether copies of r may be merged into one record with a
// count: decisions that repeat (a name looked up again, a host refused again, a file
// written again), not records carrying a result of their own (bytes a connection
// moved, an exit code), and not exec, workspace, lifecycle or other kinds, which are
// kept exact (yet still capped).
func aggregatable(r Record) bool {
	switch r.Kind {
	case KindDNS, KindNetwork, KindHTTP, KindFile:
		return r.BytesIn == 0 && r.BytesOut == 0 && r.ExitCode == nil && r.Count == 0
	}
	return false
}

// keyOf hashes r's content: every field but Time and Duration (which differ between
// copies of one event) and Count and Since (which the Log sets).
func (l *Log) keyOf(r Record) key {
	var h maphash.Hash
	h.SetSeed(l.seed)
	str := func(s string) {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))]) // length-prefixed: fields cannot run into each other
		h.WriteString(s)
	}
	num := func(i int64) { str(strconv.FormatInt(i, 10)) }
	for _, p := range stringFields(&r) {
		str(*p)
	}
	num(int64(r.Port))
	num(int64(r.Status))
	num(r.BytesIn)
	num(r.BytesOut)
	num(int64(r.Added))
	num(int64(r.Modified))
	num(int64(r.Deleted))
	num(int64(r.Distinct))
	if r.ExitCode != nil {
		num(int64(*r.ExitCode))
	} else {
		str("-")
	}
	num(int64(len(r.Argv)))
	for _, a := range r.Argv {
		str(a)
	}
	ks := make([]string, 0, len(r.Extra))
	for k := range r.Extra {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	for _, k := range ks {
		str(k)
		str(r.Extra[k])
	}
	k := key{class: r.Kind + "\x00" + r.Decision, content: h.Sum64(), agg: aggregatable(r)}

	h.Reset()
	target := r.Host
	if target == "" {
		target = r.Subject
	}
	str(r.Kind)
	str(target)
	k.host = h.Sum64()
	return k
}

// admit decides whether r is written now (true) or counted (false), opening a new
// interval if the current one is over. l.mu is held.
func (l *Log) admit(r Record, k key, now time.Time) bool {
	w := &l.win
	if !w.start.IsZero() && now.Sub(w.start) >= l.opt.Interval {
		l.flush(now) // an error here belongs to records already accepted; r is still written
	}
	if w.start.IsZero() {
		w.start = now
	}
	if w.classes == nil {
		w.seen, w.classes = map[uint64]*repeat{}, map[string]*class{}
	}
	c := w.classes[k.class]
	if c == nil {
		c = &class{kind: r.Kind, decision: r.Decision}
		w.classes[k.class] = c
	}

	if k.agg {
		if rp := w.seen[k.content]; rp != nil {
			if rp.n == 0 {
				rp.since = r.Time
				w.repeats = append(w.repeats, rp)
			}
			rp.n++
			rp.rec = r
			l.arm(now)
			return false
		}
	}
	if l.opt.MaxKeys < 0 || c.written < l.opt.MaxKeys || l.firstSecretBlock(r, k) {
		c.written++
		if k.agg {
			w.seen[k.content] = &repeat{}
		}
		if r.Decision == SecretBlocked && len(l.firstSeen) < maxFirstSeen {
			l.firstSeen[k.host] = struct{}{}
		}
		return true
	}

	if c.suppressed == 0 {
		c.since = r.Time
		c.distinct = map[uint64]struct{}{}
		w.over = append(w.over, c)
	}
	c.suppressed++
	if len(c.distinct) < maxDistinct {
		c.distinct[k.content] = struct{}{}
	}
	c.bytesIn += r.BytesIn
	c.bytesOut += r.BytesOut
	l.arm(now)
	return false
}

// firstSecretBlock reports whether r is the first secret_blocked record toward its
// host: one that is written even past the cap, so a flood cannot hide where a secret
// was being sent.
func (l *Log) firstSecretBlock(r Record, k key) bool {
	if r.Decision != SecretBlocked || len(l.firstSeen) >= maxFirstSeen {
		return false
	}
	_, seen := l.firstSeen[k.host]
	return !seen
}

// arm makes sure a timer will flush the current interval when it ends, so counts
// reach the file even if the sandbox falls silent. l.mu is held.
func (l *Log) arm(now time.Time) {
	if l.armed {
		return
	}
	l.armed = true
	l.timer = time.AfterFunc(l.win.start.Add(l.opt.Interval).Sub(now), l.tick)
}

func (l *Log) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = false
	if l.closed || l.win.start.IsZero() {
		return
	}
	now := time.Now()
	if now.Sub(l.win.start) >= l.opt.Interval {
		l.flush(now)
	} else if len(l.win.repeats) > 0 || len(l.win.over) > 0 {
		l.arm(now) // a write began a new interval since this timer was set
	}
}

// flush writes one record per repeated content (the latest copy, with Count and
// Since) and one audit record per kind and decision that went over the cap, then
// closes the interval. l.mu is held.
func (l *Log) flush(now time.Time) error {
	w := &l.win
	var first error
	put := func(r Record) {
		r, line, err := encode(r)
		if err == nil {
			err = l.emit(r, line)
		}
		if first == nil && err != nil {
			first = err
		}
	}
	for _, rp := range w.repeats {
		r := rp.rec
		r.Count, r.Since = rp.n, rp.since
		put(r)
	}
	for _, c := range w.over {
		put(l.suppressedRecord(c, now))
	}
	clear(w.seen)
	clear(w.classes)
	w.repeats, w.over, w.start = w.repeats[:0], w.over[:0], time.Time{}
	return first
}

func (l *Log) suppressedRecord(c *class, now time.Time) Record {
	what := c.kind
	if c.decision != "" {
		what += " " + c.decision
	}
	distinct := strconv.Itoa(len(c.distinct))
	if len(c.distinct) >= maxDistinct {
		distinct = "at least " + distinct
	}
	return Record{
		Time: now.UTC(), Sandbox: l.sandbox, Kind: KindAudit, Decision: DecisionSuppressed,
		Subject: what, Count: c.suppressed, Since: c.since, Distinct: len(c.distinct),
		BytesIn: c.bytesIn, BytesOut: c.bytesOut,
		Reason: fmt.Sprintf("%d more %s records (%s distinct) not written one by one: over %d per %v",
			c.suppressed, what, distinct, l.opt.MaxKeys, l.opt.Interval),
	}
}

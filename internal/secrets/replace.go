package secrets

import (
	"bytes"
	"fmt"
	"io"
)

// chunkSize is how much a streaming replacer reads from its source at a time.
const chunkSize = 32 << 10

// rule is one pattern to look for and what finding it means.
type rule struct {
	pat  []byte
	repl []byte     // written in place of pat
	name string     // the secret, reported by the swaps
	leak *LeakError // non-nil: finding pat is an error, not a replacement
}

// matcher finds the leftmost occurrence of any of a few patterns, the longest one when
// several start at the same place. Patterns are few (one or two per secret), so it
// searches for each with bytes.Index rather than building an automaton.
type matcher struct {
	rules  []rule
	maxLen int
	first  [256]bool // first bytes of patterns, to skip most positions when looking for a partial match
}

func newMatcher(rules []rule) *matcher {
	m := &matcher{rules: rules}
	for _, r := range rules {
		if len(r.pat) == 0 {
			panic("secrets: empty pattern") // NewSet guarantees this never happens
		}
		m.maxLen = max(m.maxLen, len(r.pat))
		m.first[r.pat[0]] = true
	}
	return m
}

// partial returns the earliest position s ≥ from at which buf[s:] is a proper prefix of
// some pattern, that is where a match may begin that more input could complete; or
// len(buf). Only this suffix must be held back: everything before it is final, which is
// what lets a server-sent event through as soon as it arrives.
func (m *matcher) partial(buf []byte, from int) int {
	for s := max(from, len(buf)-m.maxLen+1); s < len(buf); s++ {
		if !m.first[buf[s]] {
			continue
		}
		tail := buf[s:]
		for i := range m.rules {
			if p := m.rules[i].pat; len(p) > len(tail) && bytes.HasPrefix(p, tail) {
				return s
			}
		}
	}
	return len(buf)
}

// cursor walks one buffer with a matcher. It remembers where each pattern next occurs,
// so a buffer with many matches costs one search per pattern, not one per match.
type cursor struct {
	m    *matcher
	next []int // per rule: its next occurrence, -1 none left, -2 unknown
	hold int   // cached partial; -2 unknown
}

func (m *matcher) cursor() *cursor {
	c := &cursor{m: m, next: make([]int, len(m.rules))}
	c.reset()
	return c
}

// reset forgets the cache; call it whenever the buffer changes.
func (c *cursor) reset() {
	for i := range c.next {
		c.next[i] = -2
	}
	c.hold = -2
}

// step looks at buf[from:]. It returns the start of the leftmost-longest match and its
// rule, if a match starts before any suffix that must be held back. Otherwise it returns
// (h, nil): buf[from:h] holds no match, and buf[h:] must wait for more input (h is
// len(buf) when final, as nothing more will come).
//
// A match returned is final: had a longer or earlier pattern been possible with more
// input, its start would be a held-back suffix at or before the match.
func (c *cursor) step(buf []byte, from int, final bool) (int, *rule) {
	end := len(buf)
	if !final {
		if c.hold < from {
			c.hold = c.m.partial(buf, from)
		}
		end = c.hold
	}
	best := -1
	var br *rule
	for i := range c.m.rules {
		r := &c.m.rules[i]
		n := c.next[i]
		if n == -2 || n >= 0 && n < from {
			if n = bytes.Index(buf[from:], r.pat); n >= 0 {
				n += from
			}
			c.next[i] = n
		}
		if n < 0 || n >= end {
			continue
		}
		if br == nil || n < best || n == best && len(r.pat) > len(br.pat) {
			best, br = n, r
		}
	}
	if br == nil {
		return end, nil
	}
	return best, br
}

// each calls f for every match in b, left to right, until f returns false.
func (m *matcher) each(b []byte, f func(at int, r *rule) bool) {
	c := m.cursor()
	for pos := 0; ; {
		at, r := c.step(b, pos, true)
		if r == nil || !f(at, r) {
			return
		}
		pos = at + len(r.pat)
	}
}

// replacer is the streaming form: an io.Reader that applies a matcher to src. It holds
// at most one chunk plus the longest pattern of input, and about two chunks of output.
type replacer struct {
	src    io.Reader
	cur    *cursor
	buf    []byte // input read; buf[pos:] is not yet examined or written out
	pos    int
	out    []byte // output; out[off:] is not yet returned
	off    int
	srcErr error // what src reported; io.EOF means buf holds the rest of the stream
	err    error // returned once out is drained: srcErr, or a *LeakError
	empty  int   // reads in a row that returned nothing
}

// Format keeps fmt away from the buffers, which hold real values.
func (r *replacer) Format(f fmt.State, _ rune) { io.WriteString(f, "secrets.reader") }

// Format keeps fmt away from the rules, which hold real values.
func (m *matcher) Format(f fmt.State, _ rune) { io.WriteString(f, "secrets.matcher") }

func newReplacer(m *matcher, src io.Reader) *replacer {
	return &replacer{src: src, cur: m.cursor()}
}

func (r *replacer) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if r.off < len(r.out) {
			n := copy(p, r.out[r.off:])
			r.off += n
			return n, nil
		}
		if r.err != nil {
			return 0, r.err
		}
		r.out, r.off = r.out[:0], 0
		r.process()
		if len(r.out) == 0 && r.err == nil {
			// Everything read is either written out or a possible start of a pattern:
			// only now block on the source, never with output in hand.
			r.fill()
		}
	}
}

// process turns examined input into output, up to about a chunk of it.
func (r *replacer) process() {
	final := r.srcErr == io.EOF
	for len(r.out) < chunkSize {
		at, rl := r.cur.step(r.buf, r.pos, final)
		r.out = append(r.out, r.buf[r.pos:at]...)
		r.pos = at
		if rl == nil {
			// At EOF nothing is held back, so this is the end. After another error the
			// held-back suffix is dropped: it may be the start of a real value.
			if r.srcErr != nil {
				r.err = r.srcErr
			}
			return
		}
		if rl.leak != nil {
			r.err = rl.leak
			return
		}
		r.out = append(r.out, rl.repl...)
		r.pos += len(rl.pat)
	}
}

// fill moves the held-back suffix to the front and reads once from src.
func (r *replacer) fill() {
	if r.buf == nil {
		r.buf = make([]byte, 0, r.cur.m.maxLen+chunkSize)
	}
	n := copy(r.buf, r.buf[r.pos:])
	r.buf, r.pos = r.buf[:n], 0
	r.cur.reset()
	m, err := r.src.Read(r.buf[n:cap(r.buf)])
	r.buf = r.buf[:n+m]
	switch {
	case err != nil:
		r.srcErr = err
	case m == 0:
		// Like bufio: a source that keeps returning nothing is broken.
		if r.empty++; r.empty >= 100 {
			r.srcErr = io.ErrNoProgress
		}
	default:
		r.empty = 0
	}
}

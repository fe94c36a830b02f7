package secrets

import "fmt"

// Stream applies a Set's replacements to a stream that arrives in pieces
// whose boundaries the caller must keep, such as the payloads of WebSocket
// frames: each Push returns at once what is final, holding back only a
// suffix that may begin a pattern, and Flush ends a piece (a message) when
// no more of it will come.
//
// A pattern split by a Flush cannot be held back whole: the start went out
// with the earlier piece, as the piece had to end. Stream remembers that
// start, and if the next piece completes the pattern it replaces the rest,
// so a real value never arrives whole (the receiver holds the value's first
// bytes and a placeholder); a placeholder completed that way is a leak all
// the same. Memory is what one Push is given plus the longest pattern.
type Stream struct {
	cur *cursor
	// buf[:sent] was already returned (the tail kept after a Flush);
	// buf[sent:] is held back.
	buf  []byte
	sent int
}

// Format keeps fmt away from the buffer and rules, which hold real values.
func (st *Stream) Format(f fmt.State, _ rune) { f.Write([]byte("secrets.Stream")) }

// RedactStream is Redact for a stream of pieces: every real value, of every
// secret whatever the host, becomes its placeholder. It is nil when there is
// nothing to redact (a nil *Stream passes pieces unchanged).
func (s *Set) RedactStream() *Stream {
	m := s.redactor()
	if m == nil {
		return nil
	}
	return &Stream{cur: m.cursor()}
}

// SwapStream is SwapBody for a stream of pieces toward host: the
// placeholders of secrets allowed there with InBody become their values,
// those allowed there without InBody pass unchanged, and those of any other
// secret make Push or Flush return a *LeakError. It is nil when nothing
// could change or be refused.
func (s *Set) SwapStream(host string) *Stream {
	rules := s.rules(host, true, same)
	if len(rules) == 0 {
		return nil
	}
	return &Stream{cur: newMatcher(rules).cursor()}
}

// Push appends to dst the output that p makes final. On a *LeakError, dst
// holds the output before the placeholder and the Stream must not be used
// again.
func (st *Stream) Push(dst, p []byte) ([]byte, error) {
	if st == nil {
		return append(dst, p...), nil
	}
	st.buf = append(st.buf, p...)
	return st.scan(dst, false)
}

// Flush appends to dst everything held back: the piece has ended, and what
// it ends with is not a value (yet; see Stream).
func (st *Stream) Flush(dst []byte) ([]byte, error) {
	if st == nil {
		return dst, nil
	}
	return st.scan(dst, true)
}

func (st *Stream) scan(dst []byte, final bool) ([]byte, error) {
	c := st.cur
	c.reset()
	buf, pos, after := st.buf, 0, 0 // after: the end of the last match
	emit := func(to int) {
		if from := max(pos, st.sent); to > from {
			dst = append(dst, buf[from:to]...)
		}
	}
	for {
		at, r := c.step(buf, pos, final)
		emit(at)
		if r == nil {
			pos = at
			break
		}
		if r.leak != nil {
			st.buf, st.sent = nil, 0
			return dst, r.leak
		}
		dst = append(dst, r.repl...)
		pos = at + len(r.pat)
		after = pos
	}
	if final {
		// All is out; keep the raw tail that may begin a pattern, so that
		// the next piece can finish it.
		pos = c.m.partial(buf, after)
		st.sent = len(buf) - pos
	} else {
		st.sent = max(st.sent-pos, 0)
	}
	n := copy(buf, buf[pos:])
	st.buf = buf[:n]
	return dst, nil
}

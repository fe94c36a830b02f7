package secrets

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

const (
	// RetiredFor is how long a replaced value stays redacted from responses. An
	// OAuth access token usually stays valid after a refresh until its own expiry
	// (hours), and a response could echo it back that long.
	RetiredFor = 24 * time.Hour
	// maxRetired bounds the values kept for redaction: a refresher that went wild
	// cannot grow memory or the redactor's work without bound.
	maxRetired = 8
	// maxRotatingPrefixLen is larger than maxPrefixLen: a rotating secret may need
	// a placeholder shaped like a JWT ("header.payload." then the marker), whose
	// payload a client decodes.
	maxRotatingPrefixLen = 4 << 10
)

// Rotator changes the value of a Secret made by NewRotating: a refresher on the
// host calls Rotate with each new access token. Every Set holding the Secret
// (NewSet copies the struct, not the value) swaps in the current value from then
// on, and redacts the previous values for RetiredFor. No method prints a value.
type Rotator struct {
	name        string
	placeholder string
	mu          sync.RWMutex
	cur         []byte
	retired     []retiredValue // oldest first
	now         func() time.Time
}

type retiredValue struct {
	v     []byte
	until time.Time
}

// NewRotating makes a Secret whose value can change, and the Rotator that
// changes it. Like New, hosts are validated and value is copied; prefix starts
// the placeholder (URL-unreserved characters, up to 4 KiB, so a JWT-shaped
// "header.payload." fits).
func NewRotating(name string, value []byte, hosts []string, prefix string) (*Secret, *Rotator, error) {
	if len(prefix) > maxRotatingPrefixLen {
		return nil, nil, fmt.Errorf("secret %s: placeholder prefix longer than %d bytes", name, maxRotatingPrefixLen)
	}
	short := prefix
	if len(short) > maxPrefixLen {
		// newSecret checks the characters; its length limit is for flags.
		short = ""
		if err := checkChars(prefix); err != nil {
			return nil, nil, fmt.Errorf("secret %s: %w", name, err)
		}
	}
	s, err := newSecret(name, value, hosts, short)
	if err != nil {
		return nil, nil, err
	}
	if short != prefix {
		for {
			s.Placeholder = newPlaceholder(prefix)
			if !strings.Contains(s.Placeholder, string(value)) {
				break
			}
		}
	}
	r := &Rotator{name: name, placeholder: s.Placeholder, cur: bytes.Clone(value), now: time.Now}
	s.value = r.current
	s.retired = r.previous
	return s, r, nil
}

// Rotate makes value the secret's current value. The old one is redacted, not
// swapped, for RetiredFor. Rotating to the current value changes nothing.
func (r *Rotator) Rotate(value []byte) error {
	if err := checkValue(value); err != nil {
		return fmt.Errorf("secret %s: %w", r.name, err)
	}
	if strings.Contains(r.placeholder, string(value)) || bytes.Contains(value, []byte(r.placeholder)) {
		return fmt.Errorf("secret %s: the new value overlaps its placeholder; it cannot be a real credential", r.name)
	}
	if bytes.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("secret %s: the new value holds a line break or NUL", r.name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if bytes.Equal(value, r.cur) {
		return nil
	}
	now := r.now()
	kept := r.retired[:0]
	for _, o := range r.retired {
		if now.Before(o.until) && !bytes.Equal(o.v, value) {
			kept = append(kept, o)
		}
	}
	kept = append(kept, retiredValue{v: r.cur, until: now.Add(RetiredFor)})
	if len(kept) > maxRetired {
		kept = kept[len(kept)-maxRetired:]
	}
	r.retired = kept
	r.cur = bytes.Clone(value)
	return nil
}

func (r *Rotator) current() []byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cur
}

// previous returns the retired values still to be redacted.
func (r *Rotator) previous() [][]byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	now := r.now()
	var out [][]byte
	for _, o := range r.retired {
		if now.Before(o.until) {
			out = append(out, o.v)
		}
	}
	return out
}

// String names the secret; never a value.
func (r *Rotator) String() string { return "secrets.Rotator(" + r.name + ")" }

// Format makes every fmt verb print String.
func (r *Rotator) Format(f fmt.State, _ rune) { io.WriteString(f, r.String()) }

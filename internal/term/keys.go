package term

import (
	"bytes"
	"fmt"
	"strings"
)

// Default key sequences: docker's detach keys, and the same prefix for the
// approval prompt of a foreground -t run.
const (
	DefaultDetachKeys = "ctrl-p,ctrl-q"
	DefaultAskKeys    = "ctrl-p,ctrl-a"
)

// maxKeys bounds a sequence: it is held back from the command while it
// may still match.
const maxKeys = 8

// ParseKeys reads a key sequence as docker's --detach-keys does: keys
// separated by commas, each one character (a-z, a digit, punctuation) or
// ctrl-X for X one of a-z, @, [, \, ], ^ and _.
func ParseKeys(s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("no keys given: give keys such as %s", DefaultDetachKeys)
	}
	var out []byte
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case len(k) == 1 && k[0] > 0x20 && k[0] < 0x7f:
			out = append(out, k[0])
		case len(k) == 6 && strings.HasPrefix(strings.ToLower(k), "ctrl-"):
			c := k[5]
			switch {
			case c >= 'a' && c <= 'z':
				out = append(out, c-'a'+1)
			case c >= 'A' && c <= 'Z':
				out = append(out, c-'A'+1)
			case c == '@', c == '[', c == '\\', c == ']', c == '^', c == '_':
				out = append(out, c-'@')
			default:
				return nil, fmt.Errorf("%q is no control key: use ctrl- with a-z, @, [, \\, ], ^ or _", k)
			}
		default:
			return nil, fmt.Errorf("%q is no key: use one character or ctrl-X, separated by commas (e.g. %s)", k, DefaultDetachKeys)
		}
	}
	if len(out) > maxKeys {
		return nil, fmt.Errorf("%q: at most %d keys", s, maxKeys)
	}
	return out, nil
}

// KeyMatcher finds key sequences in what the user types: bytes that may
// begin one are held back until the next key says whether it is one.
type KeyMatcher struct {
	seqs [][]byte
	held []byte
}

// NewKeyMatcher matches seqs (empty ones never match).
func NewKeyMatcher(seqs ...[]byte) *KeyMatcher { return &KeyMatcher{seqs: seqs} }

// Feed takes what was read and returns what goes on to the command, the
// index of the sequence that was typed (-1 for none), and the bytes read
// after that sequence, for the caller to feed again once it has acted.
func (m *KeyMatcher) Feed(b []byte) (pass []byte, seq int, rest []byte) {
	for i, c := range b {
		m.held = append(m.held, c)
		for len(m.held) > 0 {
			full, prefix := m.match(m.held)
			if full >= 0 {
				m.held = m.held[:0]
				return pass, full, b[i+1:]
			}
			if prefix {
				break
			}
			pass = append(pass, m.held[0])
			m.held = m.held[1:]
		}
	}
	return pass, -1, nil
}

func (m *KeyMatcher) match(held []byte) (full int, prefix bool) {
	for i, s := range m.seqs {
		if len(s) == 0 {
			continue
		}
		if bytes.Equal(s, held) {
			return i, false
		}
		if bytes.HasPrefix(s, held) {
			prefix = true
		}
	}
	return -1, prefix
}

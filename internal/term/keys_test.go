package term

import (
	"bytes"
	"testing"
)

func TestParseKeys(t *testing.T) {
	for in, want := range map[string]string{
		"ctrl-p,ctrl-q":  "\x10\x11",
		"ctrl-P, ctrl-Q": "\x10\x11",
		"ctrl-@":         "\x00",
		"ctrl-\\,q":      "\x1c" + "q",
		"ctrl-],ctrl-_":  "\x1d\x1f",
		"a,b,c":          "abc",
	} {
		got, err := ParseKeys(in)
		if err != nil || string(got) != want {
			t.Errorf("ParseKeys(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ctrl-1", "ctrl-", "ab", "a,,b", "ctrl-p,ctrl-q,a,b,c,d,e,f,g", " ", "ctrl-é"} {
		if got, err := ParseKeys(in); err == nil {
			t.Errorf("ParseKeys(%q) = %q, want an error", in, got)
		}
	}
}

func TestKeyMatcher(t *testing.T) {
	detach, ask := []byte("\x10\x11"), []byte("\x10\x01")
	for name, tc := range map[string]struct {
		in   []string // successive reads
		pass string
		seq  int
		rest string
	}{
		"plain keys pass at once":                        {in: []string{"ls\r"}, pass: "ls\r", seq: -1},
		"a sequence in one read is found":                {in: []string{"ab\x10\x11cd"}, pass: "ab", seq: 0, rest: "cd"},
		"a sequence split across reads is found":         {in: []string{"x\x10", "\x11"}, pass: "x", seq: 0},
		"the second sequence sharing a prefix":           {in: []string{"\x10\x01z"}, seq: 1, rest: "z"},
		"a prefix then another key lets both through":    {in: []string{"\x10", "k"}, pass: "\x10k", seq: -1},
		"a doubled prefix still finds the sequence":      {in: []string{"\x10\x10\x11"}, pass: "\x10", seq: 0},
		"a held prefix is not passed before it is known": {in: []string{"a\x10"}, pass: "a", seq: -1},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewKeyMatcher(detach, ask)
			var pass []byte
			seq, rest := -1, []byte(nil)
			for _, r := range tc.in {
				p, s, re := m.Feed([]byte(r))
				pass = append(pass, p...)
				if s >= 0 {
					seq, rest = s, re
					break
				}
			}
			if !bytes.Equal(pass, []byte(tc.pass)) || seq != tc.seq || string(rest) != tc.rest {
				t.Errorf("Feed(%q) = %q, %d, %q; want %q, %d, %q", tc.in, pass, seq, rest, tc.pass, tc.seq, tc.rest)
			}
		})
	}
}

func FuzzKeyMatcher(f *testing.F) {
	f.Add([]byte("ab\x10\x11cd"))
	f.Add([]byte("\x10\x10\x10"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := NewKeyMatcher([]byte("\x10\x11"), []byte("\x10\x01"))
		for len(b) > 0 {
			_, s, rest := m.Feed(b)
			if s < 0 {
				break
			}
			b = rest
		}
		if len(m.held) > maxKeys {
			t.Fatalf("held %d bytes", len(m.held))
		}
	})
}

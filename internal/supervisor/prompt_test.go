package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
)

func TestKeyDecision(t *testing.T) {
	for k, want := range map[byte]approval.Decision{
		'a': {Allow: true, Scope: approval.Once},
		's': {Allow: true, Scope: approval.Session},
		'p': {Allow: true, Scope: approval.Project},
		'g': {Allow: true, Scope: approval.Global},
		'd': {Scope: approval.Once},
		'D': {Scope: approval.Once},
		'S': {Scope: approval.Session},
		'P': {Scope: approval.Project},
		'G': {Scope: approval.Global},
	} {
		d, ok, later := keyDecision(k)
		if !ok || later || d.Allow != want.Allow || d.Scope != want.Scope || d.By != "terminal" {
			t.Errorf("keyDecision(%q) = %+v, %v, %v; want %+v by terminal", k, d, ok, later, want)
		}
	}
	for _, k := range []byte{'\r', '\n', 0x1b, 0x03} {
		if _, ok, later := keyDecision(k); ok || !later {
			t.Errorf("keyDecision(%q) should leave it for later", k)
		}
	}
	for _, k := range []byte{'x', 'A', ' ', 0x10} {
		if _, ok, later := keyDecision(k); ok || later {
			t.Errorf("keyDecision(%q) should answer nothing", k)
		}
	}
}

func TestWhatThePromptShows(t *testing.T) {
	for name, tc := range map[string]struct {
		r     approval.Request
		want  string
		whole bool
	}{
		"a host":                        {approval.Request{Kind: "network", Subject: "example.com"}, "network example.com", true},
		"escapes in a host are escaped": {approval.Request{Kind: "network", Subject: "evil\x1b[2J\x1b]0;x\x07.com"}, "network evil?[2J?]0;x?.com", true},
		"a C1 escape is escaped":        {approval.Request{Subject: "a\u009b31mb"}, "network a?31mb", true},
		"detail lines each escaped":     {approval.Request{Kind: "hostexec", Subject: "make", Detail: "dir: /w\x1b[1m\nnetwork: none"}, "hostexec make dir: /w?[1m\r\n    network: none", true},
		"too long to show is not whole": {approval.Request{Kind: "mcp", ID: "x-1", Subject: strings.Repeat("a", maxPromptShown+1)}, "mcp request x-1", false},
	} {
		t.Run(name, func(t *testing.T) {
			got, whole := what(tc.r)
			if !strings.HasPrefix(got, tc.want) || whole != tc.whole {
				t.Errorf("what(%+v) = %q, %v; want %q…, %v", tc.r, got, whole, tc.want, tc.whole)
			}
		})
	}
}

// TestKeyFilterTakesOnlyAHumansKey: what the terminal sends itself (the
// answer to a query the sandbox wrote) answers nothing, even in pieces.
func TestKeyFilterTakesOnlyAHumansKey(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for name, tc := range map[string]struct {
		reads [][]byte
		gaps  time.Duration
		want  []byte
	}{
		"a key alone is a key":                    {reads: [][]byte{[]byte("a")}, want: []byte("a")},
		"a colour query's answer is no key":       {reads: [][]byte{[]byte("\x1b]10;rgb:ffff/ffff/ffff\x07")}},
		"nor its tail in a read of its own":       {reads: [][]byte{[]byte("\x1b]10;rgb:ffff/"), []byte("g"), []byte("\x07")}, gaps: 10 * time.Millisecond},
		"a cursor report ending in a letter":      {reads: [][]byte{[]byte("\x1b[12;1"), []byte("R")}, gaps: 5 * time.Millisecond},
		"a paste is no key":                       {reads: [][]byte{[]byte("gg")}},
		"a key well after an escape counts again": {reads: [][]byte{[]byte("\x1b"), []byte("d")}, gaps: time.Second, want: []byte("d")},
		"an arrow key answers nothing":            {reads: [][]byte{[]byte("\x1b[A")}},
		"keys one by one are keys":                {reads: [][]byte{[]byte("x"), []byte("g")}, gaps: 50 * time.Millisecond, want: []byte("xg")},
	} {
		t.Run(name, func(t *testing.T) {
			var f keyFilter
			var got []byte
			now := t0
			for _, r := range tc.reads {
				if k, ok := f.key(r, now); ok {
					got = append(got, k)
				}
				now = now.Add(tc.gaps)
			}
			if string(got) != string(tc.want) {
				t.Errorf("keys from %q = %q, want %q", tc.reads, got, tc.want)
			}
		})
	}
}

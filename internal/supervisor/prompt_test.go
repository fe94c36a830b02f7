package supervisor

import (
	"strings"
	"testing"

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

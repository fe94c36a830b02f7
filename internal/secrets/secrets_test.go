package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const realValue = "sk-REAL-VALUE-0123456789abcdef"

func mustNew(t testing.TB, name, value string, hosts ...string) *Secret {
	t.Helper()
	s, err := New(name, []byte(value), hosts)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	return s
}

func TestPlaceholdersAreRandomUniqueAndRecognisable(t *testing.T) {
	seen := make(map[string]bool, 10000)
	for range 10000 {
		s := mustNew(t, "TOKEN", realValue, "api.x.com")
		p := s.Placeholder
		if seen[p] {
			t.Fatalf("placeholder %q repeated", p)
		}
		seen[p] = true
		random, ok := strings.CutPrefix(p, Marker)
		if !ok {
			t.Fatalf("placeholder %q does not start with %q", p, Marker)
		}
		b, err := base64.RawURLEncoding.DecodeString(random)
		if err != nil || len(b)*8 < 192 {
			t.Fatalf("random part %q is not ≥192 bits of base64url (%v)", random, err)
		}
		if strings.Contains(p, realValue) {
			t.Fatal("placeholder contains the value")
		}
		if err := checkPlaceholder(p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name   string
		secret string
		value  string
		hosts  []string
		want   string // error substring; "" for success
	}{
		{"a plain secret is made", "TOKEN", realValue, []string{"api.x.com"}, ""},
		{"an empty value is refused", "TOKEN", "", []string{"x.com"}, "the value is empty"},
		{"a 3-byte value is refused", "TOKEN", "abc", []string{"x.com"}, "shorter than 4 bytes"},
		{"a 4-byte value is accepted", "TOKEN", "ab#d", []string{"x.com"}, ""},
		{"a huge value is refused", "TOKEN", strings.Repeat("x", maxValueLen+1), []string{"x.com"}, "longer than 64 KiB"},
		{"a value inside the marker is refused", "TOKEN", "lock-ph", []string{"x.com"}, "fixed text"},
		{"a bad name is refused", "MY-TOKEN", realValue, []string{"x.com"}, "not an environment variable name"},
		{"no hosts is refused", "TOKEN", realValue, nil, "no hosts"},
		{"a bad host is refused", "TOKEN", realValue, []string{"x.com:443"}, "not ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.secret, []byte(tt.value), tt.hosts)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if string(s.val()) != tt.value {
					t.Fatal("value not kept")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v, want %q", err, tt.want)
			}
			if len(tt.value) > 0 && strings.Contains(err.Error(), tt.value) {
				t.Fatalf("error %q reveals the value", err)
			}
		})
	}
}

func TestNewCopiesTheValue(t *testing.T) {
	v := []byte(realValue)
	s, err := New("TOKEN", v, []string{"x.com"})
	if err != nil {
		t.Fatal(err)
	}
	clear(v)
	if string(s.val()) != realValue {
		t.Fatal("the secret shares the caller's slice")
	}
}

func TestHostMatching(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		host    string
		want    bool
	}{
		{"an exact name matches itself", "api.x.com", "api.x.com", true},
		{"case and a trailing dot do not matter", "api.x.com", "API.X.com.", true},
		{"a port on the request host is ignored", "api.x.com", "api.x.com:443", true},
		{"another name does not match", "api.x.com", "api.y.com", false},
		{"a subdomain of an exact name does not match", "x.com", "api.x.com", false},
		{"a pattern matches its apex", "*.example.com", "example.com", true},
		{"a pattern matches one more label", "*.example.com", "a.example.com", true},
		{"a pattern does not match two more labels", "*.example.com", "a.b.example.com", false},
		{"a pattern does not match a longer name with the same ending", "*.example.com", "badexample.com", false},
		{"an IPv6 address matches with brackets and port", "[::1]", "[::1]:8080", true},
		{"an IPv4-mapped address matches its IPv4 form", "10.0.0.1", "::ffff:10.0.0.1", true},
		{"an address does not match another", "10.0.0.1", "10.0.0.2", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := normalizeHost(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if got := hostMatches(p, canonHost(tt.host)); got != tt.want {
				t.Fatalf("hostMatches(%q, %q) = %t, want %t", tt.pattern, tt.host, got, tt.want)
			}
		})
	}
}

// holder puts a Secret and a Set where fmt cannot call their methods.
type holder struct {
	s   Secret
	p   *Secret
	set Set
	all []*Secret
}

type exported struct {
	S   Secret
	Set *Set
}

func TestNothingPrintsAValue(t *testing.T) {
	s := mustNew(t, "TOKEN", realValue, "api.x.com")
	s.InBody = true
	set, err := NewSet(s, mustNew(t, "OTHER", "other-REAL-abcdef", "*.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	things := []any{s, *s, []*Secret{s}, []Secret{*s}, map[string]*Secret{"a": s}, set, *set,
		holder{*s, s, *set, []*Secret{s}}, &holder{*s, s, *set, []*Secret{s}}, exported{*s, set}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T", "%10.3v"} {
		for _, x := range things {
			out := fmt.Sprintf(verb, x)
			if strings.Contains(out, realValue) || strings.Contains(out, "other-REAL-abcdef") ||
				strings.Contains(out, fmt.Sprintf("%x", realValue)) || strings.Contains(out, fmt.Sprintf("%X", realValue)) ||
				strings.Contains(out, fmt.Sprint([]byte(realValue))) {
				t.Fatalf("fmt %s of %T reveals the value: %s", verb, x, out)
			}
		}
	}
	for _, x := range []any{s, *s, set, exported{*s, set}} {
		j, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(j, []byte(realValue)) {
			t.Fatalf("JSON reveals the value: %s", j)
		}
	}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "secret", s, "set", set)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "secret", s, "set", set)
	if strings.Contains(logs.String(), realValue) {
		t.Fatalf("slog reveals the value: %s", logs.String())
	}
	if got := s.String(); !strings.HasPrefix(got, "TOKEN@api.x.com:body (airlock-ph-") {
		t.Fatalf("String() = %q", got)
	}
	if got := fmt.Sprintf("%#v", s); !strings.Contains(got, "value:<redacted>") {
		t.Fatalf("%%#v = %q", got)
	}
}

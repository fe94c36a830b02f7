package secrets

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testSet has TOKEN for api.x.com (headers only), BODY for *.example.com (bodies too)
// and WEIRD, whose value needs percent-encoding and cannot go in a header.
type testSet struct {
	set                   *Set
	token, body, weird    *Secret
	tokenV, bodyV, weirdV string
}

func newTestSet(t testing.TB) testSet {
	t.Helper()
	ts := testSet{tokenV: realValue, bodyV: "body-REAL-value-42", weirdV: "a/b+c d\r\n"}
	ts.token = mustNew(t, "TOKEN", ts.tokenV, "api.x.com")
	ts.body = mustNew(t, "BODY", ts.bodyV, "*.example.com")
	ts.body.InBody = true
	ts.weird = mustNew(t, "WEIRD", ts.weirdV, "api.x.com")
	var err error
	if ts.set, err = NewSet(ts.token, ts.body, ts.weird); err != nil {
		t.Fatal(err)
	}
	return ts
}

func assertLeak(t *testing.T, err error, secret, host string) {
	t.Helper()
	var le *LeakError
	if !errors.As(err, &le) || le.Secret != secret || le.Host != host {
		t.Fatalf("error = %v, want a LeakError for %s toward %s", err, secret, host)
	}
	want := "secret " + secret + "'s placeholder was sent to " + host + ", which is not one of its hosts"
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err, want)
	}
}

func TestNewSet(t *testing.T) {
	a := mustNew(t, "A", realValue, "x.com")
	b := mustNew(t, "B", "other-REAL-abcdef", "x.com")
	dupName := mustNew(t, "A", "third-REAL-value", "x.com")
	samePh := *b
	samePh.Name = "C"
	short := &Secret{Name: "S", Hosts: []string{"x.com"}, Placeholder: newPlaceholder(""), value: seal([]byte("abc"))}
	edited := *a
	edited.Placeholder = "x"
	badHosts := *a
	badHosts.Hosts = []string{"*.com"}
	inPh := mustNew(t, "D", a.Placeholder[len(Marker)+3:len(Marker)+12], "x.com")
	tests := []struct {
		name    string
		secrets []*Secret
		want    string
	}{
		{"distinct secrets make a set", []*Secret{a, b}, ""},
		{"no secrets make an empty set", nil, ""},
		{"a duplicate name is refused", []*Secret{a, dupName}, "secret A is given twice"},
		{"a shared placeholder is refused", []*Secret{b, &samePh}, "share a placeholder"},
		{"a nil secret is refused", []*Secret{a, nil}, "secret 2 is nil"},
		{"a secret not made by New has no value", []*Secret{{Name: "Z", Hosts: []string{"x.com"}, Placeholder: a.Placeholder}}, "has no value"},
		{"a value shorter than 4 bytes is refused", []*Secret{short}, "shorter than 4 bytes"},
		{"an edited placeholder is refused", []*Secret{&edited}, "placeholder is not"},
		{"edited hosts are checked again", []*Secret{&badHosts}, "top-level domain"},
		{"a value inside another's placeholder is refused", []*Secret{a, inPh}, "occurs in secret A's placeholder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSet(tt.secrets...)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(s.Env()) != len(tt.secrets) {
					t.Fatalf("Env() = %v", s.Env())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewSet error = %v, want %q", err, tt.want)
			}
			for _, v := range []string{realValue, "other-REAL-abcdef", "third-REAL-value", "abc"} {
				if strings.Contains(err.Error(), v) {
					t.Fatalf("error %q reveals a value", err)
				}
			}
		})
	}
}

func TestEnvGivesPlaceholdersOnly(t *testing.T) {
	ts := newTestSet(t)
	want := []string{"TOKEN=" + ts.token.Placeholder, "BODY=" + ts.body.Placeholder, "WEIRD=" + ts.weird.Placeholder}
	if got := ts.set.Env(); !slices.Equal(got, want) {
		t.Fatalf("Env() = %v, want %v", got, want)
	}
	if ts.set.Leaks([]byte(strings.Join(ts.set.Env(), "\n"))) {
		t.Fatal("Env() holds a value")
	}
}

func TestSetIgnoresLaterEditsToItsSecrets(t *testing.T) {
	s := mustNew(t, "TOKEN", realValue, "api.x.com")
	set, err := NewSet(s)
	if err != nil {
		t.Fatal(err)
	}
	s.Hosts[0] = "evil.com"
	s.Hosts = append(s.Hosts, "evil2.com")
	if _, _, err := set.SwapHeader("evil.com", s.Placeholder); err == nil {
		t.Fatal("an edit to the caller's Secret reached the set")
	}
}

func TestSwapHeader(t *testing.T) {
	ts := newTestSet(t)
	tok, body := ts.token.Placeholder, ts.body.Placeholder
	tests := []struct {
		name     string
		host     string
		in       string
		want     string
		names    []string
		leak     string // secret named in the LeakError
		otherErr string
	}{
		{"a bearer token is swapped toward its host", "api.x.com", "Bearer " + tok, "Bearer " + realValue, []string{"TOKEN"}, "", ""},
		{"the host may carry a port and any case", "API.X.COM:443", "Bearer " + tok, "Bearer " + realValue, []string{"TOKEN"}, "", ""},
		{"two placeholders of one secret are both swapped", "api.x.com", tok + "," + tok, realValue + "," + realValue, []string{"TOKEN"}, "", ""},
		{"a header without placeholders is unchanged", "api.x.com", "application/json", "application/json", nil, "", ""},
		{"a pattern host takes the apex", "example.com", "k=" + body, "k=" + ts.bodyV, []string{"BODY"}, "", ""},
		{"a pattern host takes one more label", "a.example.com", "k=" + body, "k=" + ts.bodyV, []string{"BODY"}, "", ""},
		{"a pattern host refuses two more labels", "a.b.example.com", "k=" + body, "", nil, "BODY", ""},
		{"another host is refused", "evil.com", "Bearer " + tok, "", nil, "TOKEN", ""},
		{"a lookalike host is refused", "api.x.com.evil.com", "Bearer " + tok, "", nil, "TOKEN", ""},
		{"one forbidden placeholder refuses the whole header", "api.x.com", tok + " " + body, "", nil, "BODY", ""},
		{"a value with a line break is refused in a header", "api.x.com", ts.weird.Placeholder, "", nil, "", "line break"},
		{"Basic credentials are swapped too", "api.x.com", "Basic " + b64("user:"+tok), "Basic " + b64("user:"+realValue), []string{"TOKEN"}, "", ""},
		{"Basic credentials toward another host are refused", "evil.com", "Basic " + b64(tok+":x"), "", nil, "TOKEN", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, names, err := ts.set.SwapHeader(tt.host, tt.in)
			switch {
			case tt.leak != "":
				assertLeak(t, err, tt.leak, canonHost(tt.host))
				if got != tt.in || names != nil {
					t.Fatalf("on a leak got %q %v, want the input unchanged", got, names)
				}
			case tt.otherErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.otherErr) || strings.Contains(err.Error(), ts.weirdV) {
					t.Fatalf("error = %v, want %q", err, tt.otherErr)
				}
			default:
				if err != nil || got != tt.want || !slices.Equal(names, tt.names) {
					t.Fatalf("SwapHeader = %q %v %v, want %q %v", got, names, err, tt.want, tt.names)
				}
			}
		})
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestSwapBasicAuth(t *testing.T) {
	ts := newTestSet(t)
	tok := ts.token.Placeholder
	tests := []struct {
		name  string
		host  string
		in    string
		want  string
		names []string
		leak  string
	}{
		{"the password is swapped", "api.x.com", "Basic " + b64("user:"+tok), "Basic " + b64("user:"+realValue), []string{"TOKEN"}, ""},
		{"the user is swapped", "api.x.com", "Basic " + b64(tok+":"), "Basic " + b64(realValue+":"), []string{"TOKEN"}, ""},
		{"the scheme is case-insensitive and kept", "api.x.com", "basic  " + b64("u:"+tok), "basic " + b64("u:"+realValue), []string{"TOKEN"}, ""},
		{"a value needing no encoding in base64 is fine", "api.x.com", "Basic " + b64("u:"+ts.weird.Placeholder), "Basic " + b64("u:"+ts.weirdV), []string{"WEIRD"}, ""},
		{"malformed base64 is unchanged", "api.x.com", "Basic " + tok, "Basic " + tok, nil, ""},
		{"credentials without a colon are unchanged", "api.x.com", "Basic " + b64(tok), "Basic " + b64(tok), nil, ""},
		{"another scheme is unchanged", "api.x.com", "Bearer " + b64("u:"+tok), "Bearer " + b64("u:"+tok), nil, ""},
		{"no placeholder leaves the value as it was", "api.x.com", "Basic   " + b64("u:p"), "Basic   " + b64("u:p"), nil, ""},
		{"another host is refused", "evil.com", "Basic " + b64("u:"+tok), "", nil, "TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, names, err := ts.set.SwapBasicAuth(tt.host, tt.in)
			if tt.leak != "" {
				assertLeak(t, err, tt.leak, tt.host)
				return
			}
			if err != nil || got != tt.want || !slices.Equal(names, tt.names) {
				t.Fatalf("SwapBasicAuth = %q %v %v, want %q %v", got, names, err, tt.want, tt.names)
			}
		})
	}
}

// encodeSome percent-encodes every third byte of s, in lower-case hex.
func encodeSome(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if i%3 == 0 {
			fmt.Fprintf(&b, "%%%02x", s[i])
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func TestSwapURL(t *testing.T) {
	ts := newTestSet(t)
	tok := ts.token.Placeholder
	tests := []struct {
		name  string
		host  string
		in    string
		want  string
		names []string
		leak  string
	}{
		{"a placeholder in the query is swapped", "api.x.com", "/v1/x?key=" + tok + "&a=b", "/v1/x?key=" + realValue + "&a=b", []string{"TOKEN"}, ""},
		{"a placeholder in the path is swapped", "api.x.com", "/keys/" + tok + "/info", "/keys/" + realValue + "/info", []string{"TOKEN"}, ""},
		{"a percent-encoded placeholder is swapped", "api.x.com", "/x?key=" + encodeSome(tok), "/x?key=" + realValue, []string{"TOKEN"}, ""},
		{"an upper-case escape is swapped", "api.x.com", "/x?key=" + tok[:3] + "%6C" + tok[4:], "/x?key=" + realValue, []string{"TOKEN"}, ""},
		{"an escape of another letter is no placeholder", "api.x.com", "/x?key=%41" + tok[1:], "/x?key=%41" + tok[1:], nil, ""},
		{"a value is inserted percent-encoded", "api.x.com", "/x?w=" + ts.weird.Placeholder, "/x?w=a%2Fb%2Bc%20d%0D%0A", []string{"WEIRD"}, ""},
		{"an absolute URL is swapped", "api.x.com", "https://api.x.com/x?k=" + tok, "https://api.x.com/x?k=" + realValue, []string{"TOKEN"}, ""},
		{"other escapes are kept", "api.x.com", "/a%2Fb?q=%20" + tok + "%2", "/a%2Fb?q=%20" + realValue + "%2", []string{"TOKEN"}, ""},
		{"a URL without placeholders is unchanged", "api.x.com", "/airlock-ph-?x=%41", "/airlock-ph-?x=%41", nil, ""},
		{"another host is refused", "evil.com", "/x?key=" + tok, "", nil, "TOKEN"},
		{"a percent-encoded placeholder toward another host is refused", "evil.com", "/x?key=" + encodeSome(tok), "", nil, "TOKEN"},
		{"a placeholder in the host name is refused", "evil.com", "http://" + tok + ".evil.com/", "", nil, "TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, names, err := ts.set.SwapURL(tt.host, tt.in)
			if tt.leak != "" {
				assertLeak(t, err, tt.leak, tt.host)
				if got != tt.in {
					t.Fatalf("on a leak got %q, want the input", got)
				}
				return
			}
			if err != nil || got != tt.want || !slices.Equal(names, tt.names) {
				t.Fatalf("SwapURL = %q %v %v, want %q %v", got, names, err, tt.want, tt.names)
			}
		})
	}
}

func TestNilAndEmptySetsChangeNothing(t *testing.T) {
	empty, err := NewSet()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Set{nil, empty} {
		if v, n, err := s.SwapHeader("x.com", "Bearer airlock-ph-x"); v != "Bearer airlock-ph-x" || n != nil || err != nil {
			t.Fatal("SwapHeader changed something")
		}
		if v, _, err := s.SwapURL("x.com", "/airlock-ph-x"); v != "/airlock-ph-x" || err != nil {
			t.Fatal("SwapURL changed something")
		}
		if s.RedactString("abcd") != "abcd" || s.Leaks([]byte("abcd")) || len(s.Env()) != 0 {
			t.Fatal("an empty set redacts or leaks")
		}
		r := strings.NewReader("x")
		if s.Redact(r) != r || s.SwapBody("x.com", r) != r {
			t.Fatal("an empty set wraps readers")
		}
	}
}

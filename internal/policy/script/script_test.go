package script

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

const example = `# A ten-line policy: the docs API only, no cookies upstream, no 5xx back.
def is_host_allowed(host, port):
    if host.endswith(".internal.corp"):
        return False
    if host == "docs.example.com" and port == 443:
        return True
    return None

def on_request(req):
    if req.method not in ("GET", "HEAD") and req.host == "docs.example.com":
        return {"deny": "docs.example.com is read-only"}
    return {"del_headers": ["cookie"], "set_headers": {"x-policy": "script"}}

def on_response(resp):
    return resp.status < 500
`

func load(t testing.TB, src string) *Script {
	t.Helper()
	s, err := New("policy.star", []byte(src), Options{Limits: Limits{Steps: 100_000, Time: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func request(method, rawurl string, h http.Header) *http.Request {
	u, _ := url.Parse(rawurl)
	if h == nil {
		h = http.Header{}
	}
	return &http.Request{Method: method, URL: u, Host: u.Host, Header: h}
}

func TestTheExampleDecidesHostsRequestsAndResponses(t *testing.T) {
	s := load(t, example)
	for _, c := range []struct {
		host            string
		port            uint16
		allowed, opines bool
	}{
		{"docs.example.com", 443, true, true},
		{"docs.example.com", 22, false, false},
		{"db.internal.corp", 443, false, true},
		{"other.test", 443, false, false},
	} {
		a, o, err := s.IsHostAllowed(c.host, c.port)
		if err != nil || a != c.allowed || o != c.opines {
			t.Errorf("is_host_allowed(%s, %d) = %v, %v, %v; want %v, %v", c.host, c.port, a, o, err, c.allowed, c.opines)
		}
	}
	r := request("GET", "https://docs.example.com/x", http.Header{"Cookie": {"a=b"}, "Accept": {"*/*"}})
	if err := s.OnRequest(r); err != nil {
		t.Fatal(err)
	}
	if r.Header.Get("Cookie") != "" || r.Header.Get("X-Policy") != "script" || r.Header.Get("Accept") != "*/*" {
		t.Errorf("headers after on_request = %v; want cookie gone, x-policy set, accept kept", r.Header)
	}
	var d *Denial
	if err := s.OnRequest(request("POST", "https://docs.example.com/x", nil)); !errors.As(err, &d) || d.Reason != "docs.example.com is read-only" {
		t.Errorf("a POST = %v; want the script's denial", err)
	}
	if err := s.OnResponse(&http.Response{StatusCode: 200, Header: http.Header{}}); err != nil {
		t.Errorf("a 200 = %v", err)
	}
	if err := s.OnResponse(&http.Response{StatusCode: 503, Header: http.Header{}}); !errors.As(err, &d) {
		t.Errorf("a 503 = %v; want a denial", err)
	}
}

func TestBadScriptsFailWithTheirLine(t *testing.T) {
	for name, c := range map[string]struct {
		src, want string
	}{
		"a syntax error":              {"def on_request(req):\n    return (\n", "policy.star:3:"},
		"an undefined name at load":   {"def on_request(req):\n    return nosuch(req)\n", "policy.star:2: undefined: nosuch"},
		"a load statement":            {"load('x.star', 'y')\ndef on_request(req):\n    pass\n", "policy.star:1: load is not available"},
		"a hook with the wrong arity": {"x = 1\ndef on_request():\n    pass\n", "policy.star:2: on_request must take 1 parameters"},
		"no hook at all":              {"x = 1\n", "defines none of"},
		"a top level that loops":      {"x = [i for i in range(100000000)]\ndef on_request(r):\n    pass\n", "policy.star:1: stopped: over its limit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New("policy.star", []byte(c.src), Options{Limits: Limits{Steps: 100_000}})
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("New = %v; want one line with %q", err, c.want)
			}
		})
	}
}

func TestHostileCallsAreRefusedAtTheirLine(t *testing.T) {
	for name, c := range map[string]struct {
		src, want string
	}{
		"a loop without end":    {"def on_request(req):\n    for i in range(1 << 40):\n        pass\n", "policy.star:2: on_request: stopped: over its limit of 100000 steps"},
		"unbounded allocation":  {"def on_request(req):\n    s = 'x'\n    for i in range(40):\n        s = s + s\n", "policy.star:4: on_request: "},
		"a big repetition":      {"def on_request(req):\n    l = []\n    for i in range(64):\n        l.append('x' * (1 << 22))\n", "on_request: stopped: allocated over its limit"},
		"an undefined call":     {"def on_request(req):\n    return req.nosuch()\n", "policy.star:2: on_request: struct has no .nosuch"},
		"a wrong return":        {"def on_request(req):\n    return 42\n", "policy.star:1: on_request: returned a int"},
		"a forbidden header":    {"def on_request(req):\n    return {'set_headers': {'host': 'evil.test'}}\n", "Host is the gateway's to set"},
		"a header injection":    {"def on_request(req):\n    return {'set_headers': {'x-a': 'b\\r\\nx-b: c'}}\n", "control character"},
		"mutating the snapshot": {"def on_request(req):\n    req.headers['x'] = 'y'\n", "policy.star:2: on_request: cannot insert into frozen hash table"},
	} {
		t.Run(name, func(t *testing.T) {
			// Steps and allocation are the bounds under test: the time
			// limit (TestTimeLimitStopsACall's) is set far off, so a busy
			// machine (the race detector, a CPU hog) cannot reach it first.
			s, err := New("policy.star", []byte(c.src), Options{Limits: Limits{Steps: 100_000, Alloc: 16 << 20, Time: 30 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			r := request("GET", "https://a.test/", http.Header{"Accept": {"*/*"}})
			err = s.OnRequest(r)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("OnRequest = %v; want %q", err, c.want)
			}
			if r.Header.Get("Host") != "" || r.Header.Get("X-A") != "" || len(r.Header) != 1 {
				t.Errorf("a refused request was changed: %v", r.Header)
			}
		})
	}
}

func TestTimeLimitStopsACall(t *testing.T) {
	s, err := New("p.star", []byte("def is_host_allowed(h, p):\n    for i in range(1 << 40):\n        pass\n"), Options{Limits: Limits{Steps: 1 << 62, Time: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = s.IsHostAllowed("a.test", 443)
	if err == nil || !strings.Contains(err.Error(), "p.star:2: is_host_allowed: stopped: over its time limit") || time.Since(start) > 2*time.Second {
		t.Errorf("IsHostAllowed = %v after %v; want the time limit", err, time.Since(start))
	}
}

func TestPrintGoesToTheCallerBounded(t *testing.T) {
	var got []string
	s, err := New("p.star", []byte("def on_request(req):\n    for i in range(100):\n        print('x' * 1000)\n"), Options{Print: func(fn, l string) { got = append(got, fn+":"+l) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.OnRequest(request("GET", "http://a.test/", nil)); err != nil {
		t.Fatal(err)
	}
	if len(got) != maxPrints || len(got[0]) > maxPrint+len("on_request:")+4 {
		t.Errorf("print gave %d lines of %d bytes; want %d of at most %d", len(got), len(got[0]), maxPrints, maxPrint)
	}
}

func TestSnapshotsBeyondTheBoundsAreRefused(t *testing.T) {
	s := load(t, "def on_request(req):\n    pass\n")
	h := http.Header{}
	for i := 0; i <= MaxHeaders; i++ {
		h.Set("X-"+strings.Repeat("a", i+1), "v")
	}
	if err := s.OnRequest(request("GET", "http://a.test/", h)); err == nil {
		t.Error("a request with more header names than shown passed")
	}
	if err := s.OnRequest(request("GET", "http://a.test/"+strings.Repeat("a", MaxTarget), nil)); err == nil {
		t.Error("a request with a target longer than shown passed")
	}
	if err := s.OnRequest(request("GET", "http://a.test/", nil)); err != nil {
		t.Errorf("the positive control: %v", err)
	}
}

// FuzzOnRequest hands arbitrary methods, targets and headers to a script
// that reads every field: no panic, and a snapshot never exceeds the bounds.
func FuzzOnRequest(f *testing.F) {
	s, err := New("f.star", []byte(`def on_request(req):
    n = len(req.method) + len(req.path) + len(req.query) + req.port + len(req.host) + len(req.scheme)
    for k, v in req.headers.items():
        n += len(k) + len(v)
    if n % 7 == 0:
        return {"deny": "seven"}
    return {"set_headers": {"x-n": str(n)}, "del_headers": [k for k in req.headers][:3]}
`), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("GET", "/a?b=c", "Accept", "*/*", "a.test:8080")
	f.Add("", "", "", "", "")
	f.Add("POST", "/%zz", "X\r\nY", "v\x00", "[::1]:99999")
	f.Fuzz(func(t *testing.T, method, target, hk, hv, host string) {
		u, err := url.Parse(target)
		if err != nil {
			u = &url.URL{Path: target}
		}
		h := http.Header{hk: {hv, hv}, strings.ToUpper(hk): {hv}}
		r := &http.Request{Method: method, URL: u, Host: host, Header: h}
		v, err := RequestValue(r)
		if err == nil {
			if n := len(v.String()); n > 2*(MaxHeaders*(MaxHeaderValue+256)+MaxTarget+512) {
				t.Fatalf("a snapshot of %d bytes", n)
			}
		}
		s.OnRequest(r)
		if len(r.Header) > 3+MaxMutations {
			t.Fatalf("%d headers after on_request", len(r.Header))
		}
	})
}

// BenchmarkOnRequest is the per-request cost of the ten-line example (bench/starlark.sh).
func BenchmarkOnRequest(b *testing.B) {
	s := load(b, example)
	h := http.Header{"Accept": {"*/*"}, "User-Agent": {"curl/8"}, "Cookie": {"a=b"}}
	for b.Loop() {
		r := request("GET", "https://docs.example.com/v1/items?page=2", h.Clone())
		if err := s.OnRequest(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOnResponse is the per-response cost of the example's on_response.
func BenchmarkOnResponse(b *testing.B) {
	s := load(b, example)
	req := request("GET", "https://docs.example.com/v1/items?page=2", http.Header{"Accept": {"*/*"}})
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}, "Content-Length": {"512"}}, Request: req}
	for b.Loop() {
		if err := s.OnResponse(resp); err != nil {
			b.Fatal(err)
		}
	}
}

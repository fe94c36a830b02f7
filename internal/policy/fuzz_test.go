package policy

import (
	"net/netip"
	"strings"
	"testing"
)

var fuzzConfig = Config{
	AllowHosts:   []string{"example.com", "*.github.com", "db.internal:5432", "x.org:*", "10.0.0.0/8:443", "93.184.216.34", "[2606:4700::1]:*"},
	DenyHosts:    []string{"*.evil.com", "bad.github.com", "10.9.0.0/16"},
	Endpoints:    []string{"api.github.com GET /repos/*", "*.github.com * /graphql", "10.0.0.7 POST /x"},
	GatewayAddrs: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3128")},
}

func validDecision(t *testing.T, d Decision) {
	t.Helper()
	if d.Verdict != Deny && d.Verdict != Allow && d.Verdict != Ask {
		t.Fatalf("verdict out of range: %v", d)
	}
	if d.Rule == "" || d.Reason == "" {
		t.Fatalf("decision without rule or reason: %#v", d)
	}
	if d.Verdict != Allow && d.Intercept {
		t.Fatalf("intercept on a refusal: %v", d)
	}
	if d.Tunnel && (d.Verdict != Allow || d.Intercept) {
		t.Fatalf("a tunnel that is refused or intercepted: %v", d)
	}
}

func FuzzHost(f *testing.F) {
	for _, s := range []string{"example.com", "a.github.com", "a.b.github.com", "EVIL.com.", "", ".", "*.x", "127.1", "[::1]",
		"10.0.0.1", "::ffff:10.9.0.1", "bücher.de", "x.org", strings.Repeat("a.", 130) + "com", "0x7f.1"} {
		f.Add(s, uint16(443), "*.example.com:22")
	}
	f.Add("db.internal", uint16(5432), "[::1]:80")
	p := mustNew(f, fuzzConfig)
	f.Fuzz(func(t *testing.T, name string, port uint16, rule string) {
		d := p.Host(name, port)
		validDecision(t, d)
		if d != p.Host(name, port) {
			t.Fatal("Host is not deterministic")
		}
		if d.Verdict == Allow && port != 80 && port != 443 && strings.HasPrefix(d.Rule, "example.com") {
			t.Fatalf("a bare rule allowed port %d: %v", port, d)
		}
		if ip, err := netip.ParseAddr(name); err == nil {
			a := p.Addr(ip, port, false)
			validDecision(t, a)
			if a != p.Addr(ip, port, false) {
				t.Fatal("Addr is not deterministic")
			}
			if c := Classify(ip); c != "public" && a.Verdict == Allow && a.Rule == "class:public" {
				t.Fatalf("%s is %s but allowed as public", ip, c)
			}
		}
		// Rules themselves are fuzzed too: New must reject or accept without panicking,
		// and an accepted rule must then be usable.
		if q, err := New(Config{Tunnels: []string{rule}}); err == nil {
			d := q.Host(name, port)
			validDecision(t, d)
			if d.Verdict == Allow && (!d.Tunnel || !strings.Contains(rule, ":") && port != 443) {
				t.Fatalf("tunnel rule %q: %v", rule, d)
			}
			Overlaps(rule, name)
		}
		if _, err := New(Config{Tunnels: []string{rule}, Endpoints: []string{name + " GET /"}}); err == nil && Overlaps(rule, name) {
			t.Fatalf("tunnel rule %q accepted with an endpoint rule for %s", rule, name)
		}
		if q, err := New(Config{AllowHosts: []string{rule}, DenyHosts: []string{rule}}); err == nil {
			d := q.Host(name, port)
			validDecision(t, d)
			if d.Verdict == Allow {
				t.Fatalf("a rule in both lists allowed: %v", d)
			}
		}
	})
}

func FuzzEndpoint(f *testing.F) {
	for _, s := range []string{"/repos/x", "/repos/../x", "/repos/%2e%2e/x", "/graphql", "/%2f", "/a?b", "", "/repos//x", "/r%"} {
		f.Add("api.github.com", "GET", s)
	}
	f.Add("10.0.0.7", "POST", "/x")
	f.Add("EXAMPLE.com", "get", "/anything")
	p := mustNew(f, fuzzConfig)
	f.Fuzz(func(t *testing.T, host, method, path string) {
		d := p.Endpoint(host, method, path)
		validDecision(t, d)
		if d != p.Endpoint(host, method, path) {
			t.Fatal("Endpoint is not deterministic")
		}
		if d.Verdict == Allow && d.Rule != "no endpoint rules" {
			clean, _, _ := strings.Cut(path, "?")
			clean, _, _ = strings.Cut(clean, "#")
			low := strings.ToLower(clean)
			if strings.Contains(clean, "/../") || strings.HasSuffix(clean, "/..") || strings.Contains(low, "%2f") ||
				strings.Contains(low, "%2e%2e") || strings.Contains(clean, "\\") {
				t.Fatalf("a confusing path passed: %q -> %v", path, d)
			}
		}
		if q, err := New(Config{Endpoints: []string{host + " " + method + " " + path}}); err == nil {
			validDecision(t, q.Endpoint(host, method, path))
		}
	})
}

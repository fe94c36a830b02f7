package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func mustNew(t testing.TB, c Config) *Policy {
	t.Helper()
	p, err := New(c)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

type want struct {
	verdict   Verdict
	rule      string
	reason    string // substring
	intercept bool
}

func check(t *testing.T, d Decision, w want) {
	t.Helper()
	if d.Verdict != w.verdict || d.Rule != w.rule || !strings.Contains(d.Reason, w.reason) || (d.Verdict != Deny && d.Intercept != w.intercept) {
		t.Errorf("got %v (intercept %v), want %v [%s] containing %q (intercept %v)", d, d.Intercept, w.verdict, w.rule, w.reason, w.intercept)
	}
}

func TestHost(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		host string
		port uint16
		want want
	}{
		{"nothing is allowed by default", Config{}, "example.com", 443,
			want{Deny, "default", "no rule allows host example.com port 443 and the default is deny", false}},
		{"a bare host allows 443 intercepted", Config{AllowHosts: []string{"example.com"}}, "example.com", 443,
			want{Allow, "example.com", "matches allow rule example.com; intercepted", true}},
		{"a bare host allows 80 intercepted", Config{AllowHosts: []string{"example.com"}}, "example.com", 80,
			want{Allow, "example.com", "intercepted", true}},
		{"a bare host does not allow 22 and says how to", Config{AllowHosts: []string{"example.com"}}, "example.com", 22,
			want{Deny, "default", "add example.com:22 for a raw tunnel", false}},
		{"host:22 allows 22 as a raw tunnel", Config{AllowHosts: []string{"example.com:22"}}, "example.com", 22,
			want{Allow, "example.com:22", "raw tunnel", false}},
		{"host:22 does not allow 443", Config{AllowHosts: []string{"example.com:22"}}, "example.com", 443,
			want{Deny, "default", "", false}},
		{"host:443 is a raw tunnel", Config{AllowHosts: []string{"example.com:443"}}, "example.com", 443,
			want{Allow, "example.com:443", "raw tunnel", false}},
		{"a bare rule beside host:443 keeps interception", Config{AllowHosts: []string{"example.com:443", "example.com"}}, "example.com", 443,
			want{Allow, "example.com", "intercepted", true}},
		{"host:* allows any port raw", Config{AllowHosts: []string{"example.com:*"}}, "example.com", 5432,
			want{Allow, "example.com:*", "raw tunnel", false}},
		{"a pattern matches its apex", Config{AllowHosts: []string{"*.example.com"}}, "example.com", 443,
			want{Allow, "*.example.com", "", true}},
		{"a pattern matches one more label", Config{AllowHosts: []string{"*.example.com"}}, "a.example.com", 443,
			want{Allow, "*.example.com", "", true}},
		{"a pattern does not match two more labels", Config{AllowHosts: []string{"*.example.com"}}, "a.b.example.com", 443,
			want{Deny, "default", "", false}},
		{"a pattern does not match a longer name with the same ending", Config{AllowHosts: []string{"*.example.com"}}, "badexample.com", 443,
			want{Deny, "default", "", false}},
		{"a pattern with a port matches that port raw", Config{AllowHosts: []string{"*.example.com:8443"}}, "a.example.com", 8443,
			want{Allow, "*.example.com:8443", "raw tunnel", false}},
		{"names are compared case-insensitively", Config{AllowHosts: []string{"Example.COM"}}, "eXample.com", 443,
			want{Allow, "Example.COM", "host example.com", true}},
		{"a trailing dot is ignored in the name", Config{AllowHosts: []string{"example.com"}}, "example.com.", 443,
			want{Allow, "example.com", "", true}},
		{"a trailing dot is ignored in the rule", Config{AllowHosts: []string{"example.com."}}, "example.com", 443,
			want{Allow, "example.com.", "", true}},
		{"pattern deny beats exact allow", Config{DenyHosts: []string{"*.evil.com"}, AllowHosts: []string{"x.evil.com"}}, "x.evil.com", 443,
			want{Deny, "*.evil.com", "host x.evil.com matches deny rule *.evil.com", false}},
		{"exact deny beats pattern allow", Config{DenyHosts: []string{"x.good.com"}, AllowHosts: []string{"*.good.com"}}, "x.good.com", 443,
			want{Deny, "x.good.com", "matches deny rule x.good.com", false}},
		{"exact deny is reported before pattern deny", Config{DenyHosts: []string{"*.evil.com", "x.evil.com"}}, "x.evil.com", 443,
			want{Deny, "x.evil.com", "", false}},
		{"exact allow beats pattern allow", Config{AllowHosts: []string{"*.good.com:*", "x.good.com"}}, "x.good.com", 443,
			want{Allow, "x.good.com", "intercepted", true}},
		{"a pattern allow still covers what the exact allow's port does not", Config{AllowHosts: []string{"x.good.com:22", "*.good.com"}}, "x.good.com", 443,
			want{Allow, "*.good.com", "", true}},
		{"a bare deny denies every port", Config{DenyHosts: []string{"evil.com"}, AllowHosts: []string{"evil.com:*"}}, "evil.com", 22,
			want{Deny, "evil.com", "", false}},
		{"a deny with a port denies only that port", Config{DenyHosts: []string{"a.com:22"}, AllowHosts: []string{"a.com:*"}}, "a.com", 23,
			want{Allow, "a.com:*", "", false}},
		{"the same host in both lists is denied", Config{DenyHosts: []string{"a.com"}, AllowHosts: []string{"a.com"}}, "a.com", 443,
			want{Deny, "a.com", "", false}},
		{"an unknown host is asked about when the default is ask", Config{Default: Ask}, "new.example", 443,
			want{Ask, "default", "no rule covers host new.example port 443; asking for approval", true}},
		{"an asked-about web port would be intercepted once approved", Config{Default: Ask}, "new.example", 80,
			want{Ask, "default", "asking for approval", true}},
		{"an asked-about other port would be a raw tunnel once approved", Config{Default: Ask}, "new.example", 5432,
			want{Ask, "default", "asking for approval", false}},
		{"an asked-about host with endpoint rules would be intercepted on any port", Config{Default: Ask, Endpoints: []string{"new.example GET /*"}}, "new.example", 8443,
			want{Ask, "default", "asking for approval", true}},
		{"the broker's name is never dialled even when a rule allows it", Config{AllowHosts: []string{"airlock.internal", "airlock.internal:*"}}, "airlock.internal", 443,
			want{Deny, "broker", "airlock.internal is served by the gateway itself and is never dialled", false}},
		{"the broker's name is never dialled even when the default is allow", Config{Default: Allow}, "AIRLOCK.Internal.", 80,
			want{Deny, "broker", "never dialled", false}},
		{"the broker's name is not asked about", Config{Default: Ask}, "airlock.internal", 80,
			want{Deny, "broker", "never dialled", false}},
		{"a name under the broker's is an ordinary name", Config{AllowHosts: []string{"*.airlock.internal"}}, "x.airlock.internal", 443,
			want{Allow, "*.airlock.internal", "intercepted", true}},
		{"deny rules still win when the default is ask", Config{Default: Ask, DenyHosts: []string{"*.evil.com"}}, "evil.com", 443,
			want{Deny, "*.evil.com", "", false}},
		{"a default allow intercepts web ports", Config{Default: Allow}, "a.com", 443,
			want{Allow, "default", "default is allow", true}},
		{"a default allow tunnels other ports", Config{Default: Allow}, "a.com", 22,
			want{Allow, "default", "raw tunnel", false}},
		{"endpoint rules force interception of a raw rule", Config{AllowHosts: []string{"api.x.com:*"}, Endpoints: []string{"api.x.com GET /*"}}, "api.x.com", 8443,
			want{Allow, "api.x.com:*", "endpoint rules", true}},
		{"a non-ASCII name is denied", Config{AllowHosts: []string{"*.example.com"}}, "bücher.example.com", 443,
			want{Deny, "invalid", "punycode", false}},
		{"an empty name is denied", Config{}, "", 443, want{Deny, "invalid", "empty name", false}},
		{"a name with an empty label is denied", Config{AllowHosts: []string{"*.example.com"}}, ".example.com", 443,
			want{Deny, "invalid", "empty label", false}},
		{"a name with a port in it is denied", Config{AllowHosts: []string{"example.com"}}, "example.com:443", 443,
			want{Deny, "invalid", "not allowed", false}},
		{"a short-form IPv4 name is denied", Config{}, "127.1", 80,
			want{Deny, "invalid", "reads as an IPv4 address", false}},
		{"a hex IPv4 name is denied", Config{}, "0x7f000001", 80,
			want{Deny, "invalid", "reads as an IPv4 address", false}},
		{"port 0 is denied", Config{AllowHosts: []string{"a.com:*"}}, "a.com", 0,
			want{Deny, "invalid", "port 0", false}},
		{"an address literal is decided as a direct connection", Config{AllowHosts: []string{"93.184.216.34:22"}}, "93.184.216.34", 22,
			want{Allow, "93.184.216.34:22", "raw tunnel", false}},
		{"a bracketed IPv6 literal is decided as a direct connection", Config{}, "[2606:4700::1]", 443,
			want{Deny, "default", "direct connections to 2606:4700::1 port 443", false}},
		{"an address literal of a refused class needs its own rule", Config{AllowHosts: []string{"0.0.0.0/0:*"}}, "127.0.0.1", 80,
			want{Deny, "class:loopback", "broader than that range", false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, mustNew(t, tt.cfg).Host(tt.host, tt.port), tt.want)
		})
	}
}

func TestAddrRefusesEveryInternalClass(t *testing.T) {
	p := mustNew(t, Config{})
	tests := []struct{ addr, class, reason string }{
		{"127.0.0.1", "loopback", "127.0.0.0/8"},
		{"127.255.255.254", "loopback", ""},
		{"::1", "loopback", ""},
		{"10.0.0.1", "private", "10.0.0.0/8"},
		{"172.16.0.1", "private", "172.16.0.0/12"},
		{"172.31.255.255", "private", ""},
		{"192.168.1.1", "private", "192.168.0.0/16"},
		{"169.254.1.1", "link-local", ""},
		{"fe80::1", "link-local", ""},
		{"fe80::1%eth0", "link-local", ""},
		{"169.254.169.254", "metadata", ""},
		{"169.254.170.2", "metadata", ""},
		{"fd00:ec2::254", "metadata", ""},
		{"100.100.100.200", "metadata", ""},
		{"100.64.0.1", "cgnat", ""},
		{"100.127.255.255", "cgnat", ""},
		{"0.0.0.0", "unspecified", "never dialled"},
		{"0.1.2.3", "this-network", ""},
		{"::", "unspecified", "never dialled"},
		{"224.0.0.1", "multicast", "never dialled"},
		{"239.255.255.250", "multicast", ""},
		{"ff02::1", "multicast", ""},
		{"255.255.255.255", "broadcast", ""},
		{"fc00::1", "private", "fc00::/7"},
		{"fd12:3456::1", "private", ""},
		{"fec0::1", "private", ""},
		{"::ffff:127.0.0.1", "loopback", "address 127.0.0.1"},
		{"::ffff:169.254.169.254", "metadata", ""},
		{"::127.0.0.1", "loopback", "IPv4-compatible embedding 127.0.0.1"},
		{"::8.8.8.8", "ipv4-compatible", ""},
		{"64:ff9b::10.0.0.1", "private", "NAT64 embedding 10.0.0.1"},
		{"64:ff9b::169.254.169.254", "metadata", "NAT64"},
		{"64:ff9b:1::a00:1", "private", "NAT64 embedding 10.0.0.1"},
		{"64:ff9b:1::a9fe:a9fe", "metadata", "NAT64"},
		{"64:ff9b:1::808:808", "nat64-local", "64:ff9b:1::/48"},
		{"64:ff9b:1:a00:1::", "unspecified", "NAT64 embedding 0.0.0.0"}, // /48 layout, still refused
		{"2002:c0a8:101::1", "private", "6to4 embedding 192.168.1.1"},
		{"2002:7f00:1::", "loopback", "6to4"},
		{"2002:a9fe:a9fe::", "metadata", "6to4"},
		{"2001::1", "teredo", "2001::/32"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo", ""},
		{"192.0.2.1", "documentation", ""},
		{"198.51.100.7", "documentation", ""},
		{"203.0.113.9", "documentation", ""},
		{"2001:db8::1", "documentation", ""},
		{"3fff::1", "documentation", ""},
		{"198.18.0.1", "benchmark", ""},
		{"198.19.255.255", "benchmark", ""},
		{"2001:2::1", "benchmark", ""},
		{"240.0.0.1", "reserved", ""},
		{"192.0.0.170", "reserved", ""},
		{"192.88.99.1", "reserved", ""},
		{"100::1", "reserved", ""},
		{"2001:1::1", "reserved", ""},
		{"4000::1", "reserved", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr+" is refused as "+tt.class, func(t *testing.T) {
			ip := netip.MustParseAddr(tt.addr)
			check(t, p.Addr(ip, 443, false), want{Deny, "class:" + tt.class, tt.reason, false})
			if got := Classify(ip); got != tt.class {
				t.Errorf("Classify = %q, want %q", got, tt.class)
			}
		})
	}
}

func TestAddrAllowsPublic(t *testing.T) {
	p := mustNew(t, Config{})
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "172.32.0.1", "100.128.0.1", "169.255.0.1",
		"2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1", "2001:4860::8888"} {
		t.Run(a+" is public", func(t *testing.T) {
			ip := netip.MustParseAddr(a)
			check(t, p.Addr(ip, 443, false), want{Allow, "class:public", "is public", false})
			if Classify(ip) != "public" {
				t.Errorf("Classify = %q", Classify(ip))
			}
		})
	}
	if Classify(netip.Addr{}) != "invalid" {
		t.Error("the zero Addr should classify as invalid")
	}
}

func TestAddrOverrides(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		addr     string
		port     uint16
		explicit bool
		want     want
	}{
		{"an explicit address (--add-host) lifts a private refusal", Config{}, "10.0.0.5", 5432, true,
			want{Allow, "explicit", "named explicitly", false}},
		{"an explicit address lifts a metadata refusal", Config{}, "169.254.169.254", 80, true,
			want{Allow, "explicit", "", false}},
		{"an explicit address does not lift unspecified", Config{}, "0.0.0.0", 80, true,
			want{Deny, "class:unspecified", "never dialled", false}},
		{"an explicit address does not lift multicast", Config{}, "ff02::1", 80, true,
			want{Deny, "class:multicast", "", false}},
		{"a rule naming the address and port lifts the refusal", Config{AllowHosts: []string{"10.0.0.5:5432"}}, "10.0.0.5", 5432, false,
			want{Allow, "10.0.0.5:5432", "names it", false}},
		{"a rule naming the address on another port does not", Config{AllowHosts: []string{"10.0.0.5:5432"}}, "10.0.0.5", 443, false,
			want{Deny, "class:private", "no rule names it", false}},
		{"a bare address rule lifts it on 443", Config{AllowHosts: []string{"10.0.0.5"}}, "10.0.0.5", 443, false,
			want{Allow, "10.0.0.5", "", false}},
		{"a CIDR inside the private range lifts it", Config{AllowHosts: []string{"10.1.0.0/16:*"}}, "10.1.2.3", 22, false,
			want{Allow, "10.1.0.0/16:*", "", false}},
		{"a CIDR broader than the range does not", Config{AllowHosts: []string{"0.0.0.0/0:*"}}, "10.1.2.3", 22, false,
			want{Deny, "class:private", "broader than that range", false}},
		{"the link-local range does not name the metadata address", Config{AllowHosts: []string{"169.254.0.0/16:*"}}, "169.254.169.254", 80, false,
			want{Deny, "class:metadata", "broader", false}},
		{"a rule for the IPv4 address covers its mapped form", Config{AllowHosts: []string{"127.0.0.1:8080"}}, "::ffff:127.0.0.1", 8080, false,
			want{Allow, "127.0.0.1:8080", "", false}},
		{"a rule for a NAT64 address lifts exactly that address", Config{AllowHosts: []string{"[64:ff9b::a00:1]:*"}}, "64:ff9b::a00:1", 22, false,
			want{Allow, "[64:ff9b::a00:1]:*", "", false}},
		{"a deny rule refuses a public address", Config{DenyHosts: []string{"8.8.8.0/24"}}, "8.8.8.8", 53, false,
			want{Deny, "8.8.8.0/24", "matches deny rule", false}},
		{"a deny rule beats explicit", Config{DenyHosts: []string{"10.0.0.5"}}, "10.0.0.5", 80, true,
			want{Deny, "10.0.0.5", "", false}},
		{"the gateway's own address is refused even when explicit", Config{GatewayAddrs: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3128")}}, "127.0.0.1", 3128, true,
			want{Deny, "gateway", "gateway's own", false}},
		{"the gateway's address on another port is not the gateway", Config{GatewayAddrs: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3128")}}, "127.0.0.1", 8080, true,
			want{Allow, "explicit", "", false}},
		{"a gateway address with port 0 covers every port", Config{GatewayAddrs: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("203.0.113.5"), 0)}}, "::ffff:203.0.113.5", 22, true,
			want{Deny, "gateway", "", false}},
		{"a gateway address behind NAT64 is still the gateway", Config{GatewayAddrs: []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("10.0.2.2"), 0)}}, "64:ff9b::a00:202", 80, true,
			want{Deny, "gateway", "", false}},
		{"the zero address is denied", Config{}, "", 80, false, want{Deny, "invalid", "not a valid IP", false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ip netip.Addr
			if tt.addr != "" {
				ip = netip.MustParseAddr(tt.addr)
			}
			check(t, mustNew(t, tt.cfg).Addr(ip, tt.port, tt.explicit), tt.want)
		})
	}
}

func TestDirect(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		addr string
		port uint16
		want want
	}{
		{"a public address with no rule is denied", Config{}, "93.184.216.34", 443,
			want{Deny, "default", "needs a rule naming the address", false}},
		{"a host rule does not cover its addresses", Config{AllowHosts: []string{"example.com:*"}}, "93.184.216.34", 443,
			want{Deny, "default", "", false}},
		{"a bare address rule allows 443 intercepted", Config{AllowHosts: []string{"93.184.216.34"}}, "93.184.216.34", 443,
			want{Allow, "93.184.216.34", "intercepted", true}},
		{"a bare address rule does not allow 22", Config{AllowHosts: []string{"93.184.216.34"}}, "93.184.216.34", 22,
			want{Deny, "default", "", false}},
		{"an address:port rule allows that port raw", Config{AllowHosts: []string{"93.184.216.34:22"}}, "93.184.216.34", 22,
			want{Allow, "93.184.216.34:22", "raw tunnel", false}},
		{"an IPv6 rule with brackets and a port", Config{AllowHosts: []string{"[2606:4700::1]:8080"}}, "2606:4700::1", 8080,
			want{Allow, "[2606:4700::1]:8080", "", false}},
		{"an unbracketed IPv6 rule is bare", Config{AllowHosts: []string{"2606:4700::1"}}, "2606:4700::1", 443,
			want{Allow, "2606:4700::1", "", true}},
		{"a CIDR rule with a port", Config{AllowHosts: []string{"93.184.216.0/24:443"}}, "93.184.216.34", 443,
			want{Allow, "93.184.216.0/24:443", "raw tunnel", false}},
		{"an exact address rule beats a CIDR rule", Config{AllowHosts: []string{"93.184.216.0/24:*", "93.184.216.34"}}, "93.184.216.34", 443,
			want{Allow, "93.184.216.34", "", true}},
		{"a rule naming a loopback address lifts its refusal", Config{AllowHosts: []string{"127.0.0.1:8080"}}, "127.0.0.1", 8080,
			want{Allow, "127.0.0.1:8080", "", false}},
		{"a broad CIDR does not reach the metadata service", Config{AllowHosts: []string{"0.0.0.0/0:*"}}, "169.254.169.254", 80,
			want{Deny, "class:metadata", "broader than that range", false}},
		{"a CIDR deny beats an exact allow", Config{DenyHosts: []string{"93.184.216.0/24"}, AllowHosts: []string{"93.184.216.34"}}, "93.184.216.34", 443,
			want{Deny, "93.184.216.0/24", "", false}},
		{"a rule for 0.0.0.0 never dials it", Config{AllowHosts: []string{"0.0.0.0:*"}}, "0.0.0.0", 80,
			want{Deny, "class:unspecified", "never dialled", false}},
		{"a default ask asks about a public address", Config{Default: Ask}, "93.184.216.34", 443,
			want{Ask, "default", "", true}},
		{"a default ask does not ask about a private address", Config{Default: Ask}, "10.0.0.1", 443,
			want{Deny, "class:private", "", false}},
		{"a default allow still refuses loopback", Config{Default: Allow}, "127.0.0.1", 443,
			want{Deny, "class:loopback", "", false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, mustNew(t, tt.cfg).Direct(netip.MustParseAddr(tt.addr), tt.port), tt.want)
		})
	}
}

func TestEndpoint(t *testing.T) {
	p := mustNew(t, Config{
		AllowHosts: []string{"api.github.com", "example.com", "*.anthropic.com"},
		Endpoints: []string{
			"api.github.com GET /repos/*",
			"api.github.com post /graphql",
			"*.anthropic.com * /v1/messages",
			"10.0.0.7 GET /*",
		},
	})
	tests := []struct {
		name, host, method, path string
		want                     want
	}{
		{"a host without endpoint rules is unaffected", "example.com", "DELETE", "/../x", want{Allow, "no endpoint rules", "host rule alone decides", true}},
		{"an exact method and prefix path pass", "api.github.com", "GET", "/repos/x/y", want{Allow, "api.github.com GET /repos/*", "GET /repos/x/y on api.github.com", true}},
		{"a prefix matches its directory", "api.github.com", "GET", "/repos/", want{Allow, "api.github.com GET /repos/*", "", true}},
		{"a prefix does not match the bare directory name", "api.github.com", "GET", "/repos", want{Deny, "endpoint rules", "none allows GET /repos", true}},
		{"a prefix does not match a longer sibling", "api.github.com", "GET", "/reposx/1", want{Deny, "endpoint rules", "", true}},
		{"the query is not matched", "api.github.com", "GET", "/repos/a?x=../../", want{Allow, "api.github.com GET /repos/*", "", true}},
		{"another method is refused", "api.github.com", "DELETE", "/repos/x", want{Deny, "endpoint rules", "none allows DELETE /repos/x", true}},
		{"rule methods are upper-cased", "api.github.com", "POST", "/graphql", want{Allow, "api.github.com post /graphql", "", true}},
		{"request methods are compared exactly", "api.github.com", "post", "/graphql", want{Deny, "endpoint rules", "", true}},
		{"an exact path does not match below it", "api.github.com", "POST", "/graphql/x", want{Deny, "endpoint rules", "", true}},
		{"the method * matches any method", "api.anthropic.com", "PATCH", "/v1/messages", want{Allow, "*.anthropic.com * /v1/messages", "", true}},
		{"a pattern host covers the apex", "anthropic.com", "POST", "/v1/messages", want{Allow, "*.anthropic.com * /v1/messages", "", true}},
		{"the host is compared case-insensitively", "API.GitHub.com.", "GET", "/repos/a", want{Allow, "api.github.com GET /repos/*", "", true}},
		{"percent-encoded letters are decoded before matching", "api.github.com", "GET", "/%72epos/a", want{Allow, "api.github.com GET /repos/*", "", true}},
		{"a dot-dot segment is refused", "api.github.com", "GET", "/repos/../admin", want{Deny, "invalid", "path traversal", true}},
		{"an encoded dot-dot segment is refused", "api.github.com", "GET", "/repos/%2e%2E/admin", want{Deny, "invalid", "encoded dot", true}},
		{"any encoded dot is refused, even one that makes no '..' segment", "api.github.com", "GET", "/repos/0%2e%2e", want{Deny, "invalid", "encoded dot", true}},
		{"a dot-dot with matrix parameters is refused", "api.github.com", "GET", "/repos/..;/admin", want{Deny, "invalid", "path traversal", true}},
		{"a dot segment is refused", "api.github.com", "GET", "/repos/./x", want{Deny, "invalid", "", true}},
		{"an encoded slash is refused", "api.github.com", "GET", "/repos/a%2Fb", want{Deny, "invalid", "%2f", true}},
		{"an encoded backslash is refused", "api.github.com", "GET", "/repos/a%5cb", want{Deny, "invalid", "", true}},
		{"a backslash is refused", "api.github.com", "GET", `/repos\..\admin`, want{Deny, "invalid", "backslash", true}},
		{"double encoding is refused", "api.github.com", "GET", "/repos/%252e%252e/x", want{Deny, "invalid", "double", true}},
		{"malformed encoding is refused", "api.github.com", "GET", "/repos/%zz", want{Deny, "invalid", "malformed", true}},
		{"an empty segment is refused", "api.github.com", "GET", "/repos//x", want{Deny, "invalid", "empty segment", true}},
		{"an encoded NUL is refused", "api.github.com", "GET", "/repos/a%00", want{Deny, "invalid", "control", true}},
		{"an absolute URL is refused", "api.github.com", "GET", "https://api.github.com/repos/x", want{Deny, "invalid", "origin-form", true}},
		{"an empty path is refused", "api.github.com", "GET", "", want{Deny, "invalid", "origin-form", true}},
		{"an address host uses its endpoint rules", "10.0.0.7", "GET", "/x", want{Allow, "10.0.0.7 GET /*", "", true}},
		{"a mapped address host uses the same rules", "::ffff:10.0.0.7", "PUT", "/x", want{Deny, "endpoint rules", "", true}},
		{"an invalid host is refused", "bad host", "GET", "/", want{Deny, "invalid", "not a valid name", false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, p.Endpoint(tt.host, tt.method, tt.path), tt.want)
		})
	}
}

func TestNewRejectsMalformedRules(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		msg  string // substring beyond the quoted rule
	}{
		{"an empty rule", Config{AllowHosts: []string{""}}, `allow rule "": empty rule`},
		{"a blank rule", Config{DenyHosts: []string{"  "}}, `deny rule "  ": empty rule`},
		{"a wildcard with nothing after it", Config{AllowHosts: []string{"*."}}, `"*.": after *.: empty name`},
		{"a bare wildcard", Config{AllowHosts: []string{"*"}}, `"*": a wildcard may only be`},
		{"two dots in a row", Config{AllowHosts: []string{"a..b"}}, `"a..b": empty label`},
		{"a wildcard glued to a label", Config{AllowHosts: []string{"*foo.com"}}, `"*foo.com": a wildcard may only be`},
		{"a wildcard in the middle", Config{AllowHosts: []string{"a.*.com"}}, `a wildcard may only be`},
		{"a URL", Config{AllowHosts: []string{"http://x"}}, `"http://x": a URL`},
		{"a path", Config{AllowHosts: []string{"example.com/x"}}, `a path is not part of a host rule`},
		{"a port too large", Config{AllowHosts: []string{"host:99999"}}, `"host:99999": port "99999"`},
		{"port zero", Config{AllowHosts: []string{"host:0"}}, `port "0"`},
		{"a named port", Config{AllowHosts: []string{"host:https"}}, `port "https"`},
		{"an empty port", Config{AllowHosts: []string{"host:"}}, `empty port`},
		{"an extra colon", Config{AllowHosts: []string{"host:port:extra"}}, `"host:port:extra": more than one ':'`},
		{"a name with two ports", Config{AllowHosts: []string{"a.com:80:81"}}, `more than one`},
		{"an unbracketed IPv6 address with a port", Config{AllowHosts: []string{"::1:99999"}}, `in brackets`},
		{"an unclosed bracket", Config{AllowHosts: []string{"[::1:80"}}, `missing ]`},
		{"junk after a bracket", Config{AllowHosts: []string{"[::1]80"}}, `after ]`},
		{"a bracketed name", Config{AllowHosts: []string{"[example.com]:80"}}, `not an IP address`},
		{"a zoned address", Config{AllowHosts: []string{"[fe80::1%eth0]:80"}}, `zoned`},
		{"a short-form IPv4 address", Config{AllowHosts: []string{"127.1"}}, `not an IP address`},
		{"a CIDR with host bits", Config{AllowHosts: []string{"10.0.0.1/8"}}, `did you mean 10.0.0.0/8`},
		{"a bad CIDR length", Config{DenyHosts: []string{"10.0.0.0/33"}}, `not a CIDR range`},
		{"a non-ASCII name", Config{AllowHosts: []string{"bücher.de"}}, `punycode`},
		{"an underscore-free bad character", Config{AllowHosts: []string{"a!b.com"}}, `character '!'`},
		{"a label with a leading hyphen", Config{AllowHosts: []string{"-a.com"}}, `starts or ends with '-'`},
		{"a label of 64 characters", Config{AllowHosts: []string{strings.Repeat("a", 64) + ".com"}}, `longer than 63`},
		{"an endpoint without method and path", Config{Endpoints: []string{"api.github.com"}}, `endpoint rule "api.github.com": want three fields`},
		{"an endpoint without a path", Config{Endpoints: []string{"api.github.com GET"}}, `want three fields`},
		{"an endpoint with extra fields", Config{Endpoints: []string{"a.com GET /x y"}}, `want three fields`},
		{"an endpoint path without a slash", Config{Endpoints: []string{"a.com GET repos"}}, `must start with /`},
		{"an endpoint path with a middle wildcard", Config{Endpoints: []string{"a.com GET /a/*/b"}}, `may only be the whole last segment`},
		{"an endpoint path with a query", Config{Endpoints: []string{"a.com GET /a?b"}}, `queries`},
		{"an endpoint path with dot-dot", Config{Endpoints: []string{"a.com GET /a/../b"}}, `path traversal`},
		{"an endpoint path with an encoded slash", Config{Endpoints: []string{"a.com GET /a%2fb"}}, `encoded slash`},
		{"an endpoint host with a port", Config{Endpoints: []string{"a.com:443 GET /"}}, `take no port`},
		{"an endpoint host that is a range", Config{Endpoints: []string{"10.0.0.0/8 GET /"}}, `not a range`},
		{"an endpoint method with odd characters", Config{Endpoints: []string{"a.com G/T /"}}, `method "G/T"`},
		{"a non-ASCII endpoint", Config{Endpoints: []string{"a.com GET /ü"}}, `punycode`},
		{"an unknown default", Config{Default: Verdict(7)}, `default verdict 7`},
	}
	for _, tt := range tests {
		t.Run("New rejects "+tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil {
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
		})
	}
}

func TestNewNamesEveryBadRuleAndTheAcceptedForms(t *testing.T) {
	_, err := New(Config{AllowHosts: []string{"ok.com", "a..b", "http://x"}, Endpoints: []string{"nope"}})
	if err == nil {
		t.Fatal("New accepted bad rules")
	}
	for _, s := range []string{`"a..b"`, `"http://x"`, `"nope"`, "*.example.com, example.com:8443", "HOST METHOD PATH"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
	if strings.Contains(err.Error(), `"ok.com"`) {
		t.Error("error names a good rule")
	}
}

func TestNewAcceptsEveryDocumentedForm(t *testing.T) {
	_, err := New(Config{
		AllowHosts: []string{"example.com", "*.example.com", "example.com:8443", "example.com:*", "*.example.co.uk", "_dmarc.example.com",
			"10.1.2.3", "10.1.2.3:5432", "[::1]:8080", "[::1]", "::1", "[::1]:*", "10.0.0.0/8", "10.0.0.0/8:443",
			"fd00::/8", "[fd00::/8]:443", "::ffff:10.0.0.0/104", " spaced.example.com "},
		DenyHosts: []string{"evil.com", "*.evil.com:22", "*.com"},
		Endpoints: []string{"api.github.com GET /repos/*", "*.x.com * *", "x.com DELETE /*", "[::1] GET /", "a.com GET /%7Euser"},
		Default:   Ask,
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestVerdictAndDecisionPrint(t *testing.T) {
	if Deny.String() != "deny" || Allow.String() != "allow" || Ask.String() != "ask" || Verdict(9).String() != "Verdict(9)" {
		t.Error("Verdict.String")
	}
	d := Decision{Verdict: Deny, Rule: "default", Reason: "r"}
	if d.String() != "deny [default]: r" {
		t.Errorf("Decision.String = %q", d)
	}
}

func TestName(t *testing.T) {
	p := mustNew(t, Config{
		AllowHosts: []string{"api.example.com", "*.example.org", "db.example.net:5432", "blocked.example.org", "10.0.0.1"},
		DenyHosts:  []string{"*.bad.example.org", "blocked.example.org", "api.example.com:8080", "bad.example.org"},
	})
	for _, c := range []struct {
		name string
		want want
	}{
		{"api.example.com", want{Allow, "api.example.com", "matches allow rule", false}},
		{"API.Example.COM.", want{Allow, "api.example.com", "", false}},
		// A deny rule for one port leaves the name answerable; Host decides the port.
		{"db.example.net", want{Allow, "db.example.net:5432", "", false}},
		{"example.org", want{Allow, "*.example.org", "", false}},
		{"www.example.org", want{Allow, "*.example.org", "", false}},
		{"a.www.example.org", want{Deny, ruleDefault, "no rule allows", false}},
		{"blocked.example.org", want{Deny, "blocked.example.org", "deny rule", false}},
		{"bad.example.org", want{Deny, "bad.example.org", "deny rule", false}},
		{"x.bad.example.org", want{Deny, "*.bad.example.org", "deny rule", false}},
		{"other.com", want{Deny, ruleDefault, "", false}},
		{"10.0.0.1", want{Deny, ruleInvalid, "an address", false}},
		{"airlock.internal", want{Deny, "broker", "never dialled", false}},
		{"Airlock.Internal.", want{Deny, "broker", "never dialled", false}},
		{"bad_name!", want{Deny, ruleInvalid, "not valid", false}},
		{"", want{Deny, ruleInvalid, "", false}},
	} {
		t.Run(c.name, func(t *testing.T) { check(t, p.Name(c.name), c.want) })
	}
}

func TestNameAsksWhenTheDefaultIsAsk(t *testing.T) {
	p := mustNew(t, Config{Default: Ask, DenyHosts: []string{"evil.com"}})
	check(t, p.Name("new.example"), want{Ask, ruleDefault, "no rule covers name new.example; asking for approval", false})
	check(t, p.Name("evil.com"), want{Deny, "evil.com", "deny rule", false})
}

func TestIsBroker(t *testing.T) {
	for name, want := range map[string]bool{
		"airlock.internal":    true,
		"AIRLOCK.INTERNAL":    true,
		"airlock.internal.":   true,
		"airlock.internal..":  false,
		"x.airlock.internal":  false,
		"airlock.internal.io": false,
		"airlock":             false,
		"":                    false,
	} {
		if got := IsBroker(name); got != want {
			t.Errorf("IsBroker(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestTunnelRules(t *testing.T) {
	p, err := New(Config{AllowHosts: []string{"*.example.com", "x.test"}, Tunnels: []string{"dl.example.com", "*.cdn.test", "raw.test:8443", "x.test"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		host         string
		port         uint16
		want         Verdict
		tunnel, icpt bool
	}{
		"a tunnel name on 443 is a blind tunnel":          {"dl.example.com", 443, Allow, true, false},
		"a tunnel name on 80 is left to other rules":      {"dl.example.com", 80, Allow, false, true},
		"a tunnel alone does not cover 80":                {"a.cdn.test", 80, Deny, false, false},
		"a tunnel pattern covers one more label":          {"a.cdn.test", 443, Allow, true, false},
		"a tunnel with a port covers that port only":      {"raw.test", 8443, Allow, true, false},
		"a sibling under an intercepted pattern stays so": {"api.example.com", 443, Allow, false, true},
	} {
		t.Run(name, func(t *testing.T) {
			d := p.Host(c.host, c.port)
			if d.Verdict != c.want || d.Tunnel != c.tunnel || d.Intercept != c.icpt {
				t.Errorf("Host(%s, %d) = %+v", c.host, c.port, d)
			}
		})
	}
	if d := p.Host("x.test", 443); d.Verdict != Allow || d.Tunnel || !d.Intercept {
		t.Errorf("a host both allowed and tunnelled: %v", d)
	}
	if d := p.Name("a.cdn.test"); d.Verdict != Allow {
		t.Errorf("DNS for a tunnelled name: %v", d)
	}
	for name, c := range map[string]Config{
		"an endpoint rule on a tunnelled host":      {Tunnels: []string{"api.test"}, Endpoints: []string{"api.test GET /*"}},
		"an endpoint pattern over a tunnelled host": {Tunnels: []string{"api.test"}, Endpoints: []string{"*.test GET /*"}},
		"a tunnel pattern over an endpoint host":    {Tunnels: []string{"*.test"}, Endpoints: []string{"api.test GET /*"}},
		"an address (SNI carries names)":            {Tunnels: []string{"10.0.0.1"}},
	} {
		t.Run("refused: "+name, func(t *testing.T) {
			if _, err := New(c); err == nil || !strings.Contains(err.Error(), "tunnel rule") {
				t.Errorf("New = %v", err)
			}
		})
	}
	for _, c := range []struct {
		tunnel, host string
		want         bool
	}{{"a.test", "a.test", true}, {"*.test", "a.test", true}, {"a.test", "*.test", true}, {"*.a.test", "*.test", true}, {"a.test", "b.test", false}, {"*.a.test", "b.test", false}} {
		if got := Overlaps(c.tunnel, c.host); got != c.want {
			t.Errorf("Overlaps(%s, %s) = %v", c.tunnel, c.host, got)
		}
	}
}

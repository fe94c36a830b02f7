package policy

import (
	"fmt"
	"net/netip"
	"sync"
)

// class is what an address is, for the refusal checks.
type class struct {
	name    string       // as returned by Classify
	within  netip.Prefix // the range that put the address in this class
	refused bool         // refused unless named by a rule or explicit
	never   bool         // refused even when named: not a unicast destination
	via     string       // the IPv6 wrapper when the class comes from an embedded IPv4 address
	inner   netip.Addr   // that embedded IPv4 address
}

func (c class) describe() string {
	if c.via != "" {
		return fmt.Sprintf("%s (%s embedding %s)", c.name, c.via, c.inner)
	}
	return fmt.Sprintf("%s (%s)", c.name, c.within)
}

type classRange struct {
	prefix netip.Prefix
	name   string
	never  bool
}

func mustRanges(rs ...string) []classRange {
	var out []classRange
	for i := 0; i < len(rs); i += 2 {
		name, never := rs[i+1], false
		if name[0] == '!' {
			name, never = name[1:], true
		}
		out = append(out, classRange{netip.MustParsePrefix(rs[i]), name, never})
	}
	return out
}

// Refused IPv4 ranges, most specific first (metadata before link-local). "!" marks
// classes no rule can lift: 0.0.0.0 dials the host's own loopback on Linux, and
// broadcast and multicast are not unicast destinations.
var v4Ranges = sync.OnceValue(func() []classRange {
	return mustRanges(
		"0.0.0.0/32", "!unspecified",
		"255.255.255.255/32", "!broadcast",
		"169.254.169.254/32", "metadata", // AWS, GCP, Azure, OpenStack, ...
		"169.254.170.2/32", "metadata", // AWS ECS task credentials
		"100.100.100.200/32", "metadata", // Alibaba Cloud
		"0.0.0.0/8", "this-network",
		"127.0.0.0/8", "loopback",
		"10.0.0.0/8", "private",
		"172.16.0.0/12", "private",
		"192.168.0.0/16", "private",
		"169.254.0.0/16", "link-local",
		"100.64.0.0/10", "cgnat",
		"192.0.0.0/24", "reserved", // IETF protocol assignments
		"192.0.2.0/24", "documentation",
		"198.51.100.0/24", "documentation",
		"203.0.113.0/24", "documentation",
		"198.18.0.0/15", "benchmark",
		"192.88.99.0/24", "reserved", // retired 6to4 relay anycast
		"224.0.0.0/4", "!multicast",
		"240.0.0.0/4", "reserved",
	)
})

// Refused IPv6 ranges that embed no IPv4 address, most specific first.
var v6Ranges = sync.OnceValue(func() []classRange {
	return mustRanges(
		"::/128", "!unspecified",
		"::1/128", "loopback",
		"2001::/32", "teredo", // the client address is obfuscated, so refuse it all
		"2001:2::/48", "benchmark",
		"2001::/23", "reserved", // IETF protocol assignments
		"2001:db8::/32", "documentation",
		"3fff::/20", "documentation",
		"fd00:ec2::254/128", "metadata", // AWS IMDS over IPv6
		"fc00::/7", "private", // unique local
		"fe80::/10", "link-local",
		"fec0::/10", "private", // deprecated site-local
		"ff00::/8", "!multicast",
		"100::/64", "reserved", // discard-only
	)
})

var (
	v4Compat  = netip.MustParsePrefix("::/96")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	global6   = netip.MustParsePrefix("2000::/3")
)

// Classify names the class of an address for audit and diagnostics: "public", "loopback",
// "private", "link-local", "metadata", "cgnat", "this-network", "documentation",
// "benchmark", "reserved", "teredo", "ipv4-compatible", "nat64-local", "unspecified", "multicast",
// "broadcast", or "invalid". An IPv6 address embedding an IPv4 one (mapped, NAT64, 6to4)
// has the class of the embedded address when that one is refused.
func Classify(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid"
	}
	return classify(ip.WithZone("").Unmap()).name
}

func classify(ip netip.Addr) class {
	if ip.Is4() {
		return lookup(v4Ranges(), ip)
	}
	// Wrappers that carry an IPv4 address are unpacked: a resolver answering with
	// 64:ff9b::a9fe:a9fe or 2002:7f00:1:: reaches 169.254.169.254 or 127.0.0.1 through a
	// NAT64 gateway or 6to4 relay, a classic DNS-rebinding and SSRF bypass of checks
	// that look only at IPv4 ranges.
	b := ip.As16()
	switch {
	case ip == netip.IPv6Unspecified() || ip == netip.IPv6Loopback():
		return lookup(v6Ranges(), ip)
	case v4Compat.Contains(ip):
		// Deprecated (RFC 4291) and mapped to IPv4 by some stacks: refused whatever it holds.
		if c, ok := embedded(ip, "IPv4-compatible", b[12:16]); ok {
			return c
		}
		return class{name: "ipv4-compatible", within: v4Compat, refused: true}
	case nat64.Contains(ip):
		if c, ok := embedded(ip, "NAT64", b[12:16]); ok {
			return c
		}
		return class{name: "public", within: nat64}
	case nat64Loc.Contains(ip):
		// Local-use NAT64 (RFC 8215) translates through the operator's own network with a
		// layout of its choosing (any RFC 6052 length inside the /48), so no embedded
		// address can be trusted to be public: refuse it all, naming the usual /96
		// embedding when that one is itself refused.
		if c, ok := embedded(ip, "NAT64", b[12:16]); ok {
			return c
		}
		return class{name: "nat64-local", within: nat64Loc, refused: true}
	case sixToFour.Contains(ip):
		if c, ok := embedded(ip, "6to4", b[2:6]); ok {
			return c
		}
		return class{name: "public", within: sixToFour}
	}
	if c := lookup(v6Ranges(), ip); c.refused {
		return c
	}
	if !global6.Contains(ip) {
		return class{name: "reserved", within: netip.PrefixFrom(ip, 128), refused: true}
	}
	return class{name: "public", within: global6}
}

// embedded classifies an IPv4 address carried in an IPv6 one; ok when it is refused.
// Only the exact IPv6 address counts as naming it, so within is that single address.
func embedded(ip netip.Addr, via string, v4 []byte) (class, bool) {
	inner := netip.AddrFrom4([4]byte(v4))
	c := lookup(v4Ranges(), inner)
	if !c.refused {
		return class{}, false
	}
	return class{name: c.name, within: netip.PrefixFrom(ip, 128), refused: true, never: c.never, via: via, inner: inner}, true
}

func lookup(rs []classRange, ip netip.Addr) class {
	for _, r := range rs {
		if r.prefix.Contains(ip) {
			return class{name: r.name, within: r.prefix, refused: true, never: r.never}
		}
	}
	if ip.Is4() {
		return class{name: "public", within: netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
	}
	return class{name: "public", within: global6}
}

package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

const hostForms = `example.com, *.example.com, example.com:8443, example.com:*, 10.1.2.3, 10.1.2.3:5432, [::1]:8080, 10.0.0.0/8, 10.0.0.0/8:443, [fd00::/8]:443`

type ruleKind int

const (
	kindName    ruleKind = iota // exact name
	kindPattern                 // *.suffix
	kindIP                      // one address
	kindCIDR                    // a range
)

// portSpec is the port part of a rule: bare (no port), one port, or every port.
type portSpec struct {
	bare bool
	any  bool
	port uint16
}

// match reports whether the spec covers port. A bare allow rule means the web ports,
// which the gateway intercepts; a bare deny rule means the whole host.
func (s portSpec) match(port uint16, deny bool) bool {
	switch {
	case s.any:
		return true
	case s.bare:
		return deny || port == 80 || port == 443
	}
	return s.port == port
}

type hostRule struct {
	text   string
	kind   ruleKind
	name   string       // kindName: the name; kindPattern: the suffix after "*."
	prefix netip.Prefix // kindIP (a single address) and kindCIDR
	ports  portSpec
	tunnel bool // a Config.Tunnels rule: a blind TLS tunnel
}

func (r *hostRule) matchName(n string) bool {
	switch r.kind {
	case kindName:
		return n == r.name
	case kindPattern:
		return MatchPattern(r.name, n)
	}
	return false
}

// MatchPattern reports whether the normalised name n falls under the
// wildcard "*.suffix": the apex suffix itself or exactly one more label, so
// a rule never silently grows to cover deeper subdomains (Cloister's rule).
func MatchPattern(suffix, n string) bool {
	if n == suffix {
		return true
	}
	head, ok := strings.CutSuffix(n, "."+suffix)
	return ok && head != "" && !strings.Contains(head, ".")
}

// names reports whether an allow rule names an address of class c explicitly enough to
// lift its refusal: an exact address always does; a CIDR only if it lies inside the
// range that made the address refused (10.0.0.0/8 names private space, 0.0.0.0/0 does not).
func (r *hostRule) names(c class) bool {
	if r.kind == kindIP {
		return true
	}
	return c.within.IsValid() && r.prefix.Addr().BitLen() == c.within.Addr().BitLen() &&
		r.prefix.Bits() >= c.within.Bits() && c.within.Contains(r.prefix.Addr())
}

// pick returns the rule of the given kind that matches and covers port. Among several
// matching allow rules a bare one wins, because interception is where endpoint rules and
// secrets apply; otherwise the first in configuration order.
func pick(rules []hostRule, kind ruleKind, match func(*hostRule) bool, port uint16, deny bool) *hostRule {
	var first *hostRule
	for i := range rules {
		r := &rules[i]
		if r.kind != kind || !r.ports.match(port, deny) || !match(r) {
			continue
		}
		if deny || (r.ports.bare && (port == 80 || port == 443)) {
			return r
		}
		if first == nil {
			first = r
		}
	}
	return first
}

func parseHostRule(s string) (hostRule, error) {
	r := hostRule{text: strings.TrimSpace(s)}
	t := r.text
	if t == "" {
		return r, errors.New("empty rule")
	}
	if err := checkASCII(t); err != nil {
		return r, err
	}
	if strings.Contains(t, "://") {
		return r, errors.New("a URL, not a host; write the host alone (and a port if not 80/443)")
	}
	if strings.ContainsAny(t, " \t\r\n") {
		return r, errors.New("contains white space")
	}
	// A whole IPv6 address or range without a port needs no brackets.
	if strings.Count(t, ":") > 1 && !strings.HasPrefix(t, "[") {
		if strings.Trim(strings.ToLower(t), "0123456789abcdef:./") != "" {
			return r, errors.New("more than one ':'; write HOST:PORT, with an IPv6 address in brackets as in [::1]:8080")
		}
		if err := r.setAddr(t); err != nil {
			return r, fmt.Errorf("%v; an IPv6 address with a port goes in brackets, as in [::1]:8080", err)
		}
		r.ports.bare = true
		return r, nil
	}
	host, port := t, ""
	bracketed := strings.HasPrefix(t, "[")
	if bracketed {
		end := strings.IndexByte(t, ']')
		if end < 0 {
			return r, errors.New("missing ] after an IPv6 address")
		}
		host, port = t[1:end], t[end+1:]
		if port != "" {
			p, ok := strings.CutPrefix(port, ":")
			if !ok {
				return r, errors.New("text after ] must be :PORT")
			}
			port = p
			if port == "" {
				return r, errors.New("empty port after ':'")
			}
		}
	} else if h, p, ok := strings.Cut(t, ":"); ok {
		host, port = h, p
		if port == "" {
			return r, errors.New("empty port after ':'")
		}
	}
	var err error
	if r.ports, err = parsePort(port); err != nil {
		return r, err
	}
	if strings.Contains(host, "/") && !bracketed && !looksNumeric(host) {
		return r, errors.New("a path is not part of a host rule; put paths in endpoint rules (HOST METHOD /path)")
	}
	if bracketed || looksNumeric(host) {
		return r, r.setAddr(host)
	}
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		n, err := NormalizeName(suffix)
		if err != nil {
			return r, fmt.Errorf("after *.: %v", err)
		}
		r.kind, r.name = kindPattern, n
		return r, nil
	}
	if strings.Contains(host, "*") {
		return r, errors.New("a wildcard may only be a whole leading label, as in *.example.com")
	}
	n, err := NormalizeName(host)
	if err != nil {
		return r, err
	}
	r.kind, r.name = kindName, n
	return r, nil
}

// looksNumeric reports whether a rule host is meant as an IPv4 address or range.
func looksNumeric(h string) bool {
	return h != "" && strings.Trim(h, "0123456789./") == ""
}

func (r *hostRule) setAddr(s string) error {
	if strings.Contains(s, "%") {
		return errors.New("zoned addresses (with %) are not accepted")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("not a CIDR range: %v", err)
		}
		if p != p.Masked() {
			return fmt.Errorf("host bits are set in the CIDR range; did you mean %s?", p.Masked())
		}
		// A range of IPv4-mapped addresses is that IPv4 range (see Policy.Addr).
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		r.kind, r.prefix = kindCIDR, p
		return nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Errorf("not an IP address: %v", err)
	}
	a = a.Unmap()
	r.kind, r.prefix = kindIP, netip.PrefixFrom(a, a.BitLen())
	return nil
}

func parsePort(s string) (portSpec, error) {
	switch s {
	case "":
		return portSpec{bare: true}, nil
	case "*":
		return portSpec{any: true}, nil
	}
	if strings.Contains(s, ":") {
		return portSpec{}, errors.New("more than one ':'; write HOST:PORT")
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return portSpec{}, fmt.Errorf("port %q is not a number from 1 to 65535 or *", s)
	}
	return portSpec{port: uint16(n)}, nil
}

func checkASCII(s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return errors.New("not ASCII; write internationalised names in punycode (xn--...)")
		}
	}
	return nil
}

// NormalizeName lower-cases a host name, drops one trailing dot and checks it is a
// plausible DNS name: ASCII, labels of 1-63 letters, digits, '-' and '_', and a last
// label that cannot read as an IPv4 address.
func NormalizeName(s string) (string, error) {
	if err := checkASCII(s); err != nil {
		return "", err
	}
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" {
		return "", errors.New("empty name")
	}
	if len(s) > 253 {
		return "", errors.New("name longer than 253 characters")
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" {
			return "", errors.New("empty label (two dots in a row, or a leading dot)")
		}
		if len(l) > 63 {
			return "", errors.New("label longer than 63 characters")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	// inet_aton reads "127.1", "2130706433" and "0x7f.1" as 127.0.0.1. Such a "name"
	// allowed by a rule could reach loopback through any tool that resolves that way, and
	// no real top-level domain is numeric, so refuse it as a name.
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || (strings.HasPrefix(last, "0x") && strings.Trim(last[2:], "0123456789abcdef") == "") {
		return "", errors.New("numeric last label: this reads as an IPv4 address; write the address in dotted-quad form")
	}
	return s, nil
}

// parseAddrLiteral recognises "10.1.2.3", "::1" and "[::1]" as addresses.
func parseAddrLiteral(s string) (netip.Addr, bool) {
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	return a, err == nil
}

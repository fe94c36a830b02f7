package mcppolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/airlock-dev/airlock/internal/policy"
)

// hostPattern is one HostIn entry: a name, *.name or an IP address, with the same
// meaning as in internal/policy (so one allow list reads the same in both places).
type hostPattern struct {
	text    string
	name    string // exact name, or for wildcard the suffix after "*."
	pattern bool
	addr    netip.Addr
}

func parseHostPattern(h string) (hostPattern, error) {
	hp := hostPattern{text: h}
	t := strings.TrimSpace(h)
	if t == "" {
		return hp, errors.New("empty host")
	}
	if strings.Contains(t, "://") || strings.Contains(t, "/") {
		return hp, errors.New("a URL or path, not a host; write the host alone")
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(t, "["), "]")); err == nil {
		if a.Zone() != "" {
			return hp, errors.New("zoned addresses are not accepted")
		}
		hp.addr = a.Unmap()
		return hp, nil
	}
	if strings.Contains(t, ":") {
		return hp, errors.New("a port is not part of host_in; write the host alone")
	}
	if suffix, ok := strings.CutPrefix(t, "*."); ok {
		n, err := policy.NormalizeName(suffix)
		if err != nil {
			return hp, fmt.Errorf("after *.: %v", err)
		}
		hp.name, hp.pattern = n, true
		return hp, nil
	}
	if strings.Contains(t, "*") {
		return hp, errors.New("a wildcard may only be a whole leading label, as in *.example.com")
	}
	n, err := policy.NormalizeName(t)
	if err != nil {
		return hp, err
	}
	hp.name = n
	return hp, nil
}

// urlHost returns the host an absolute URL reaches: a normalised name (lower case, no
// trailing dot) or an unmapped address. Userinfo is skipped the way every URL parser
// agrees on (https://good.com@evil.com reaches evil.com); anything parsers disagree
// on (backslashes, white space, control characters) and numeric forms that
// inet_aton would read as an address (127.1, 2130706433) are errors.
func urlHost(s string) (name string, addr netip.Addr, err error) {
	if len(s) > 8192 {
		return "", addr, errors.New("longer than 8192 bytes")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '\\' || c == 0x7f {
			return "", addr, fmt.Errorf("contains %q, which URL parsers read differently", c)
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", addr, err
	}
	if u.Scheme == "" || u.Host == "" {
		return "", addr, errors.New("not an absolute URL with a host")
	}
	h := u.Hostname()
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", addr, errors.New("zoned address")
		}
		return "", a.Unmap(), nil
	}
	n, err := policy.NormalizeName(h)
	if err != nil {
		return "", addr, fmt.Errorf("host %q: %v", h, err)
	}
	return n, addr, nil
}

func (hp hostPattern) match(name string, addr netip.Addr) bool {
	if hp.addr.IsValid() {
		return addr.IsValid() && addr == hp.addr
	}
	if name == "" {
		return false
	}
	if hp.pattern {
		return policy.MatchPattern(hp.name, name)
	}
	return name == hp.name
}

func hostIn(c *compiledCond, v any) (tri, string) {
	list, ok := stringList(v)
	if !ok {
		return unsure, fmt.Sprintf("%s is %s, not a URL or list of URLs", c.arg, aType(v))
	}
	if len(list) == 0 {
		return no, ""
	}
	var whys []string
	for _, s := range list {
		name, addr, err := urlHost(s)
		if err != nil {
			return unsure, fmt.Sprintf("%s %q is not a URL that can be checked: %v", c.arg, clip(s), err)
		}
		host := name
		if addr.IsValid() {
			host = addr.String()
		}
		var hit *hostPattern
		for i := range c.hostIn {
			if c.hostIn[i].match(name, addr) {
				hit = &c.hostIn[i]
				break
			}
		}
		if hit == nil {
			return no, ""
		}
		whys = append(whys, fmt.Sprintf("%s host %s matches %s", c.arg, host, hit.text))
	}
	return yes, strings.Join(whys, ", ")
}

package policy

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

const endpointForms = `"HOST METHOD PATH", e.g. "api.github.com GET /repos/*", "*.example.com * /v1/messages"; HOST is a name, *.name or address without a port; METHOD is a method or *; PATH is /exact, /prefix/* or *`

type endpointRule struct {
	text   string
	host   hostRule // kindName, kindPattern, or a host-name string for an address (kindName)
	method string   // upper case, or "*"
	path   string   // decoded; for a prefix rule it ends in "/"
	prefix bool
}

func (r *endpointRule) matchPath(p string) bool {
	if r.prefix {
		return strings.HasPrefix(p, r.path)
	}
	return p == r.path
}

func parseEndpointRule(s string) (endpointRule, error) {
	r := endpointRule{text: strings.TrimSpace(s)}
	if err := checkASCII(s); err != nil {
		return r, err
	}
	f := strings.Fields(s)
	if len(f) != 3 {
		return r, fmt.Errorf("want three fields (HOST METHOD PATH), got %d", len(f))
	}
	host, method, path := f[0], f[1], f[2]

	if a, ok := parseAddrLiteral(host); ok {
		if a.Zone() != "" {
			return r, errors.New("zoned addresses (with %) are not accepted")
		}
		r.host = hostRule{kind: kindName, name: a.Unmap().String()}
	} else {
		h, err := parseHostRule(host)
		if err != nil {
			return r, fmt.Errorf("host %q: %v", host, err)
		}
		if !h.ports.bare {
			return r, fmt.Errorf("host %q: endpoint rules take no port", host)
		}
		if h.kind != kindName && h.kind != kindPattern {
			return r, fmt.Errorf("host %q: endpoint rules take a name, *.name or one address, not a range", host)
		}
		r.host = h
	}
	r.host.text = host

	if method != "*" {
		for i := 0; i < len(method); i++ {
			c := method[i]
			if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '-' || c == '_') {
				return r, fmt.Errorf("method %q: letters, '-' and '_' only, or *", method)
			}
		}
		method = strings.ToUpper(method)
	}
	r.method = method

	switch {
	case path == "*" || path == "/*":
		r.path, r.prefix = "/", true
		return r, nil
	case !strings.HasPrefix(path, "/"):
		return r, fmt.Errorf("path %q must start with /", path)
	case strings.ContainsAny(path, "?#"):
		return r, fmt.Errorf("path %q: queries and fragments are not matched; leave them out", path)
	}
	if p, ok := strings.CutSuffix(path, "/*"); ok {
		path, r.prefix = p+"/", true
	}
	if strings.Contains(path, "*") {
		return r, fmt.Errorf("path %q: * may only be the whole last segment, as in /repos/*", path)
	}
	clean, err := cleanPath(path)
	if err != nil {
		return r, fmt.Errorf("path %q: %v", path, err)
	}
	r.path = clean
	return r, nil
}

// endpointsFor returns the endpoint rules for a canonical host; rules for the exact name
// and for patterns covering it all apply together.
func (p *Policy) endpointsFor(host string) []*endpointRule {
	var out []*endpointRule
	for i := range p.endpoints {
		if p.endpoints[i].host.matchName(host) {
			out = append(out, &p.endpoints[i])
		}
	}
	return out
}

func (p *Policy) hasEndpoints(host string) bool {
	for i := range p.endpoints {
		if p.endpoints[i].host.matchName(host) {
			return true
		}
	}
	return false
}

// Endpoint decides an intercepted HTTP request. A host with endpoint rules admits only
// requests whose method and path match one of them (the gateway answers 403 otherwise);
// a host without endpoint rules is unaffected and left to the host rules. Methods are
// compared exactly (rules are upper-cased), paths after percent-decoding and without
// the query; paths that servers could read differently from this check are refused.
func (p *Policy) Endpoint(host, method, path string) Decision {
	h, err := canonicalHost(host)
	if err != nil {
		return Decision{Verdict: Deny, Rule: ruleInvalid, Reason: fmt.Sprintf("host %q is not a valid name: %v", host, err)}
	}
	rules := p.endpointsFor(h)
	if len(rules) == 0 {
		return Decision{Verdict: Allow, Rule: "no endpoint rules", Intercept: true,
			Reason: fmt.Sprintf("host %s has no endpoint rules, so its host rule alone decides", h)}
	}
	raw := path
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	clean, err := cleanPath(raw)
	if err != nil {
		return Decision{Verdict: Deny, Rule: ruleInvalid,
			Reason: fmt.Sprintf("request path %q to %s is refused: %v", trim(path), h, err)}
	}
	for _, r := range rules {
		if (r.method == "*" || r.method == method) && r.matchPath(clean) {
			return Decision{Verdict: Allow, Rule: r.text, Intercept: true,
				Reason: fmt.Sprintf("%s %s on %s matches endpoint rule %s", trim(method), trim(clean), h, r.text)}
		}
	}
	return Decision{Verdict: Deny, Rule: "endpoint rules",
		Reason: fmt.Sprintf("host %s has endpoint rules and none allows %s %s", h, trim(method), trim(clean))}
}

// canonicalHost is the form endpoint rules are matched against: a normalised name, or an
// address in its canonical text form.
func canonicalHost(s string) (string, error) {
	if a, ok := parseAddrLiteral(s); ok {
		return a.WithZone("").Unmap().String(), nil
	}
	return NormalizeName(s)
}

// cleanPath percent-decodes an origin-form path and refuses the forms on which a proxy
// and a server are known to disagree, so that the path checked is the path served:
// dot segments (also as "..;" which Tomcat treats as ".."), encoded or raw backslashes and
// slashes inside a segment, double encoding, empty segments and control characters.
func cleanPath(raw string) (string, error) {
	if raw == "" || raw[0] != '/' {
		return "", errors.New("not an origin-form path (it must start with /)")
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] <= ' ' || raw[i] == 0x7f {
			return "", errors.New("white space or control character in path")
		}
		if raw[i] == '\\' {
			return "", errors.New("backslash in path (some servers read it as /)")
		}
	}
	lower := strings.ToLower(raw)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") {
		return "", errors.New("encoded slash or backslash (%2f, %5c) in path: servers disagree on whether it separates segments")
	}
	if strings.Contains(lower, "%2e") {
		// Clients have no reason to encode a dot, and servers disagree on
		// whether %2e%2e is a parent segment: refuse rather than guess.
		return "", errors.New("encoded dot (%2e) in path: servers disagree on whether it can form a '..' segment")
	}
	dec, err := url.PathUnescape(raw)
	if err != nil {
		return "", errors.New("malformed percent-encoding in path")
	}
	for i := 0; i < len(dec); i++ {
		if dec[i] < ' ' || dec[i] == 0x7f {
			return "", errors.New("encoded control character in path")
		}
		if dec[i] == '%' && i+2 < len(dec) && ishex(dec[i+1]) && ishex(dec[i+2]) {
			return "", errors.New("double percent-encoding in path: a second decoder would see a different path")
		}
	}
	segs := strings.Split(dec[1:], "/")
	for i, seg := range segs {
		base, _, _ := strings.Cut(seg, ";")
		if base == "." || base == ".." {
			return "", errors.New("'.' or '..' segment in path (path traversal)")
		}
		if seg == "" && i != len(segs)-1 {
			return "", errors.New("empty segment (//) in path")
		}
	}
	return dec, nil
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// trim keeps attacker-chosen text in reasons short.
func trim(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

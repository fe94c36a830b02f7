package secrets

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
)

// LeakError reports a placeholder on its way to a host that is not one of its secret's
// hosts. The gateway answers 403 and audits "secret_blocked".
type LeakError struct{ Secret, Host string }

func (e *LeakError) Error() string {
	host := e.Host
	if host == "" {
		host = `""`
	}
	return fmt.Sprintf("secret %s's placeholder was sent to %s, which is not one of its hosts", e.Secret, host)
}

// Set is the secrets of one sandbox. It is immutable and safe for concurrent use; a nil
// *Set has no secrets.
type Set struct {
	// Only Secrets hold values, in closures fmt cannot print; matchers are built per call
	// (secrets are few) so that no field of a Set holds a value fmt could reach.
	secrets []*Secret // copies, so later edits to the caller's Secrets change nothing
}

// NewSet checks that the secrets can live together: unique names and placeholders,
// values of at least 4 bytes, and no value or placeholder inside another, since either
// would make one replacement undo or reveal another.
func NewSet(secrets ...*Secret) (*Set, error) {
	s := &Set{}
	for i, in := range secrets {
		if in == nil {
			return nil, fmt.Errorf("secret %d is nil", i+1)
		}
		if err := checkName(in.Name); err != nil {
			return nil, fmt.Errorf("secret %d: name: %w", i+1, err)
		}
		if in.value == nil {
			return nil, fmt.Errorf("secret %s has no value; make secrets with New or ParseFlag", in.Name)
		}
		if err := checkValue(in.val()); err != nil {
			return nil, fmt.Errorf("secret %s: %w", in.Name, err)
		}
		if err := checkPlaceholder(in.Placeholder); err != nil {
			return nil, fmt.Errorf("secret %s: %w", in.Name, err)
		}
		if in.Git != "" && !validGitUser(in.Git) {
			// It goes into a shell function git runs (GitConfig).
			return nil, fmt.Errorf("secret %s: the git user may hold only letters, digits and - . _", in.Name)
		}
		hosts, err := normalizeHosts(in.Hosts)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", in.Name, err)
		}
		c := *in
		c.Hosts = hosts
		for _, o := range s.secrets {
			switch {
			case o.Name == c.Name:
				return nil, fmt.Errorf("secret %s is given twice", c.Name)
			case strings.Contains(o.Placeholder, c.Placeholder) || strings.Contains(c.Placeholder, o.Placeholder):
				return nil, fmt.Errorf("secrets %s and %s share a placeholder; make each with New or ParseFlag", o.Name, c.Name)
			}
		}
		s.secrets = append(s.secrets, &c)
	}
	for _, v := range s.secrets {
		for _, p := range s.secrets {
			if strings.Contains(p.Placeholder, string(v.val())) {
				return nil, fmt.Errorf("secret %s's value occurs in secret %s's placeholder; it cannot be a real credential", v.Name, p.Name)
			}
			if bytes.Contains(v.val(), []byte(p.Placeholder)) {
				return nil, fmt.Errorf("secret %s's value contains secret %s's placeholder", v.Name, p.Name)
			}
		}
	}
	return s, nil
}

// Env is NAME=placeholder for each secret, for the sandbox's environment.
func (s *Set) Env() []string {
	if s == nil {
		return nil
	}
	env := make([]string, len(s.secrets))
	for i, c := range s.secrets {
		env[i] = c.Name + "=" + c.Placeholder
	}
	return env
}

// All lists the secrets in order.
func (s *Set) All() []*Secret {
	if s == nil {
		return nil
	}
	return append([]*Secret(nil), s.secrets...)
}

// Hosts lists every host some secret may be sent to: each is allowed.
func (s *Set) Hosts() []string {
	if s == nil {
		return nil
	}
	var hosts []string
	for _, c := range s.secrets {
		hosts = append(hosts, c.Hosts...)
	}
	return hosts
}

// Names lists the secrets' names in order.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	names := make([]string, len(s.secrets))
	for i, c := range s.secrets {
		names[i] = c.Name
	}
	return names
}

// String lists the secrets; never a value.
func (s *Set) String() string {
	if s == nil {
		return "secrets.Set[]"
	}
	parts := make([]string, len(s.secrets))
	for i, c := range s.secrets {
		parts[i] = c.String()
	}
	return "secrets.Set[" + strings.Join(parts, ", ") + "]"
}

// Format makes every fmt verb print String.
func (s *Set) Format(f fmt.State, _ rune) { io.WriteString(f, s.String()) }

// rules builds the outbound rules toward host: the placeholder of a secret allowed there
// becomes enc(value); the placeholder of any other secret is a leak. With body set,
// allowed secrets without InBody get no rule: their placeholder passes unchanged.
func (s *Set) rules(host string, body bool, enc func([]byte) []byte) []rule {
	if s == nil {
		return nil
	}
	h := canonHost(host)
	var rules []rule
	for _, c := range s.secrets {
		r := rule{pat: []byte(c.Placeholder), name: c.Name}
		switch {
		case !c.allowed(h):
			r.leak = &LeakError{Secret: c.Name, Host: h}
		case body && !c.InBody:
			continue
		default:
			r.repl = enc(c.val())
		}
		rules = append(rules, r)
	}
	return rules
}

func same(b []byte) []byte { return b }

// swap replaces placeholders in b toward host. It stops at the first leak.
func (s *Set) swap(host string, b []byte, enc func([]byte) []byte) ([]byte, []string, error) {
	if s == nil || !bytes.Contains(b, []byte(Marker)) {
		return b, nil, nil
	}
	var (
		out   []byte
		names []string
		err   error
		last  int
	)
	newMatcher(s.rules(host, false, enc)).each(b, func(at int, r *rule) bool {
		if r.leak != nil {
			err = r.leak
			return false
		}
		out = append(append(out, b[last:at]...), r.repl...)
		last = at + len(r.pat)
		names = addName(names, r.name)
		return true
	})
	if err != nil {
		return b, nil, err
	}
	if names == nil {
		return b, nil, nil
	}
	return append(out, b[last:]...), names, nil
}

func addName(names []string, n string) []string {
	for _, o := range names {
		if o == n {
			return names
		}
	}
	return append(names, n)
}

// SwapHeader swaps placeholders in one header value for a request to host (a name or
// address, with or without port). It returns the new value and the names swapped; on a
// *LeakError the value comes back unchanged. A "Basic ..." value is also decoded and
// swapped inside (SwapBasicAuth), so a gateway calling SwapHeader on every header misses
// no placeholder. A value with a line break or NUL is refused rather than put in a header,
// where it could split the request.
func (s *Set) SwapHeader(host, value string) (string, []string, error) {
	out, names, err := s.swap(host, []byte(value), same)
	if err != nil {
		return value, nil, err
	}
	for _, n := range names {
		if bytes.ContainsAny(s.byName(n).val(), "\r\n\x00") {
			return value, nil, fmt.Errorf("secret %s: its value holds a line break or NUL, which cannot go in a header", n)
		}
	}
	v, more, err := s.SwapBasicAuth(host, string(out))
	if err != nil {
		return value, nil, err
	}
	for _, n := range more {
		names = addName(names, n)
	}
	return v, names, nil
}

func (s *Set) byName(n string) *Secret {
	for _, c := range s.secrets {
		if c.Name == n {
			return c
		}
	}
	return nil
}

// SwapBasicAuth swaps placeholders inside "Basic base64(user:pass)" for a request to host
// and re-encodes. Anything that is not well-formed Basic credentials comes back
// unchanged, without error.
func (s *Set) SwapBasicAuth(host, headerValue string) (string, []string, error) {
	scheme, rest, ok := strings.Cut(headerValue, " ")
	if s == nil || !ok || !strings.EqualFold(scheme, "Basic") {
		return headerValue, nil, nil
	}
	token := strings.TrimSpace(rest)
	raw, err := base64.StdEncoding.DecodeString(token)
	if err != nil || !bytes.Contains(raw, []byte(":")) {
		return headerValue, nil, nil
	}
	// A placeholder holds no ':', so swapping in "user:pass" as a whole is swapping in
	// each part.
	out, names, err := s.swap(host, raw, same)
	if err != nil || names == nil {
		return headerValue, nil, err
	}
	return scheme + " " + base64.StdEncoding.EncodeToString(out), names, nil
}

// SwapURL swaps placeholders in a request target (origin form "/path?query" or an
// absolute URL) for a request to host, including placeholders with some characters
// percent-encoded. Values are inserted percent-encoded (all but unreserved characters),
// which means the same in a path and in a query.
func (s *Set) SwapURL(host, rawURL string) (string, []string, error) {
	if s == nil {
		return rawURL, nil, nil
	}
	// Placeholders are made of unreserved characters only; decoding just the escapes of
	// those gives the text in which to look, and at[i] maps it back to rawURL.
	dec := make([]byte, 0, len(rawURL))
	at := make([]int, 0, len(rawURL)+1)
	for i := 0; i < len(rawURL); {
		if rawURL[i] == '%' && i+2 < len(rawURL) && ishex(rawURL[i+1]) && ishex(rawURL[i+2]) {
			if c := unhex(rawURL[i+1])<<4 | unhex(rawURL[i+2]); unreserved(c) {
				dec, at = append(dec, c), append(at, i)
				i += 3
				continue
			}
		}
		dec, at = append(dec, rawURL[i]), append(at, i)
		i++
	}
	at = append(at, len(rawURL))
	if !bytes.Contains(dec, []byte(Marker)) {
		return rawURL, nil, nil
	}
	var (
		out   strings.Builder
		names []string
		err   error
		last  int
	)
	newMatcher(s.rules(host, false, percentEncode)).each(dec, func(i int, r *rule) bool {
		if r.leak != nil {
			err = r.leak
			return false
		}
		out.WriteString(rawURL[last:at[i]])
		out.Write(r.repl)
		last = at[i+len(r.pat)]
		names = addName(names, r.name)
		return true
	})
	if err != nil {
		return rawURL, nil, err
	}
	if names == nil {
		return rawURL, nil, nil
	}
	out.WriteString(rawURL[last:])
	return out.String(), names, nil
}

func ishex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func percentEncode(b []byte) []byte {
	const hex = "0123456789ABCDEF"
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if unreserved(c) {
			out = append(out, c)
		} else {
			out = append(out, '%', hex[c>>4], hex[c&15])
		}
	}
	return out
}

// SwapBody returns a reader that swaps placeholders in a streamed request body toward
// host: the placeholders of secrets allowed there with InBody become their values; those
// of secrets allowed there without InBody pass unchanged; those of any other secret make
// Read return a *LeakError (after the text before it, which holds no placeholder: the
// gateway must then abort the upstream request). It holds at most one read chunk plus
// the longest placeholder, and blocks on body only when it has nothing to return.
func (s *Set) SwapBody(host string, body io.Reader) io.Reader {
	rules := s.rules(host, true, same)
	if body == nil || len(rules) == 0 {
		return body
	}
	return newReplacer(newMatcher(rules), body)
}

// Redact returns a reader that replaces every real value, of every secret whatever the
// host, with its placeholder: for response bodies, which might echo a credential back
// into the sandbox. It streams like SwapBody; at EOF or an error nothing real is held, but
// a stream ending in the first bytes of a value passes them on, as they are not a value.
func (s *Set) Redact(r io.Reader) io.Reader {
	m := s.redactor()
	if m == nil || r == nil {
		return r
	}
	return newReplacer(m, r)
}

// redactor matches every value, to replace it with its placeholder; nil without secrets.
func (s *Set) redactor() *matcher {
	if s == nil || len(s.secrets) == 0 {
		return nil
	}
	rules := make([]rule, 0, len(s.secrets))
	for _, c := range s.secrets {
		rules = append(rules, rule{pat: c.val(), repl: []byte(c.Placeholder), name: c.Name})
		for _, v := range c.old() {
			rules = append(rules, rule{pat: v, repl: []byte(c.Placeholder), name: c.Name})
		}
	}
	return newMatcher(rules)
}

// RedactString is Redact for one string, such as a response header value.
func (s *Set) RedactString(v string) string {
	m := s.redactor()
	if m == nil {
		return v
	}
	b := []byte(v)
	var (
		out  []byte
		last int
	)
	m.each(b, func(at int, r *rule) bool {
		out = append(append(out, b[last:at]...), r.repl...)
		last = at + len(r.pat)
		return true
	})
	if out == nil {
		return v
	}
	return string(append(out, b[last:]...))
}

// Leaks reports whether b contains any real value, without saying which.
func (s *Set) Leaks(b []byte) bool {
	if s == nil {
		return false
	}
	for _, c := range s.secrets {
		if bytes.Contains(b, c.val()) {
			return true
		}
		for _, v := range c.old() {
			if bytes.Contains(b, v) {
				return true
			}
		}
	}
	return false
}

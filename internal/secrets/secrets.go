// Package secrets keeps real credentials on the host: the sandbox sees placeholders, and these are swapped for the real values only on their way to the secret's own hosts.
package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/internal/policy"
)

const (
	// Marker is in every placeholder, so a placeholder is recognisable in logs and the
	// swap functions can skip text without one cheaply.
	Marker = "airlock-ph-"
	// randomBytes is 256 bits, above the 192 the design asks for: a placeholder must be
	// unguessable, or a sandbox could aim a guessed one at a host it may reach.
	randomBytes = 32
	// randomChars is the base64url length of randomBytes.
	randomChars = (randomBytes*8 + 5) / 6
	// minValueLen: shorter values turn up by chance in responses, which Redact would then
	// rewrite, corrupting them.
	minValueLen = 4
	// maxValueLen bounds what Redact holds back between reads; a longer "credential" is
	// almost certainly the wrong file.
	maxValueLen = 64 << 10
	// maxPrefixLen bounds the :prefix= option.
	maxPrefixLen = 64
)

// Secret is one credential: its name and placeholder inside the sandbox, the hosts its
// real value may go to, and the value itself, which no method prints.
type Secret struct {
	Name        string   // env var name inside the sandbox
	Hosts       []string // exact hosts or "*.example.com" patterns (the apex and one more label)
	Placeholder string   // what the sandbox sees
	InBody      bool     // also swap in request bodies (opt-in: bodies are large and often echoed)
	// Git, if set, is the user name git sends with the placeholder: git over
	// HTTPS to Hosts gets the placeholder from a credential helper (GitConfig).
	Git string
	// value is a closure because fmt cannot look inside one: printing a struct that holds
	// a Secret where fmt cannot call Format (an unexported field) shows an address. A
	// pointer is not enough, as a bad verb (%s on a pointer) makes fmt dereference it.
	value func() []byte
	// retired, for a Secret made by NewRotating, returns values it held before,
	// still redacted from responses but never swapped in.
	retired func() [][]byte
}

// val returns the real value, nil for a Secret not made by New or ParseFlag.
func (s *Secret) val() []byte {
	if s.value == nil {
		return nil
	}
	return s.value()
}

// old returns the values a rotating secret held before, still to be redacted.
func (s *Secret) old() [][]byte {
	if s.retired == nil {
		return nil
	}
	return s.retired()
}

func seal(v []byte) func() []byte {
	v = bytes.Clone(v)
	return func() []byte { return v }
}

// New makes a Secret with a fresh placeholder. hosts are validated and normalised;
// value is copied, so the caller may clear its own copy.
func New(name string, value []byte, hosts []string) (*Secret, error) {
	return newSecret(name, value, hosts, "")
}

func newSecret(name string, value []byte, hosts []string, prefix string) (*Secret, error) {
	if err := checkName(name); err != nil {
		return nil, fmt.Errorf("secret name: %w", err)
	}
	hs, err := normalizeHosts(hosts)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	if err := checkValue(value); err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	if strings.Contains(prefix+Marker, string(value)) {
		// Every placeholder would contain the value, and Redact would rewrite each
		// placeholder it meets.
		return nil, fmt.Errorf("secret %s: the value is part of the placeholder's fixed text; it cannot be a real credential", name)
	}
	// A random part containing the value is astronomically unlikely for values of
	// minValueLen or more, but cheap to rule out.
	for {
		ph := newPlaceholder(prefix)
		if !strings.Contains(ph, string(value)) {
			return &Secret{Name: name, Hosts: hs, Placeholder: ph, value: seal(value)}, nil
		}
	}
}

// newPlaceholder returns prefix + Marker + 43 base64url characters of crypto/rand.
func newPlaceholder(prefix string) string {
	var b [randomBytes]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the program instead
	return prefix + Marker + base64.RawURLEncoding.EncodeToString(b[:])
}

func checkValue(v []byte) error {
	switch {
	case len(v) == 0:
		return errors.New("the value is empty")
	case len(v) < minValueLen:
		return fmt.Errorf("the value is shorter than %d bytes, too likely to occur by chance in responses, which would then be rewritten", minValueLen)
	case len(v) > maxValueLen:
		return fmt.Errorf("the value is longer than %d KiB; is it the right file?", maxValueLen>>10)
	}
	return nil
}

// checkPrefix allows only URL-unreserved characters, so a placeholder never needs
// percent-encoding and SwapURL recognises it in any encoding.
func checkPrefix(p string) error {
	if len(p) > maxPrefixLen {
		return fmt.Errorf("placeholder prefix longer than %d characters", maxPrefixLen)
	}
	return checkChars(p)
}

// checkChars is checkPrefix without the length limit.
func checkChars(p string) error {
	for i := 0; i < len(p); i++ {
		if !unreserved(p[i]) {
			return fmt.Errorf("placeholder prefix may hold only letters, digits and - . _ ~, not %q", p[i])
		}
	}
	return nil
}

// checkPlaceholder validates a placeholder that may have been edited after New.
func checkPlaceholder(p string) error {
	i := strings.Index(p, Marker)
	if i < 0 || len(p)-i-len(Marker) < randomChars {
		return fmt.Errorf("placeholder is not %q followed by %d random characters; make secrets with New or ParseFlag", Marker, randomChars)
	}
	for j := 0; j < len(p); j++ {
		if !unreserved(p[j]) {
			return errors.New("placeholder holds a character that is not URL-unreserved")
		}
	}
	return nil
}

func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// checkName accepts what a POSIX shell accepts as a variable name.
func checkName(n string) error {
	if n == "" {
		return errors.New("empty name")
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return errors.New("not an environment variable name: use letters, digits and _, not starting with a digit")
		}
	}
	return nil
}

// normalizeHosts validates each host and returns them normalised, without duplicates.
func normalizeHosts(hosts []string) ([]string, error) {
	if len(hosts) == 0 {
		return nil, errors.New("no hosts: a secret must name the hosts its value may go to")
	}
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		n, err := normalizeHost(h)
		if err != nil {
			return nil, fmt.Errorf("host %q: %w", h, err)
		}
		dup := false
		for _, o := range out {
			dup = dup || o == n
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out, nil
}

// normalizeHost validates a configured host: a name, "*.name" or an IP address, without
// port. It follows the policy package's rules, and is stricter in one place: "*.com"
// would send the value to any host under a top-level domain, which anyone can register
// (as would *.workers.dev, a public suffix: refused like an allow rule's wildcard).
func normalizeHost(h string) (string, error) {
	switch {
	case h == "":
		return "", errors.New("empty host")
	case strings.Contains(h, "://"):
		return "", errors.New("a URL, not a host; write the host alone")
	case strings.ContainsAny(h, " \t\r\n"):
		return "", errors.New("contains white space")
	case strings.Contains(h, "/"):
		return "", errors.New("a path or range; a secret goes to named hosts or single addresses")
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		a, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !a.Is6() {
			return "", errors.New("not an IPv6 address in brackets")
		}
		if a.Zone() != "" {
			return "", errors.New("zoned addresses (with %) are not accepted")
		}
		return a.Unmap().String(), nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return "", errors.New("zoned addresses (with %) are not accepted")
		}
		return a.Unmap().String(), nil
	}
	if strings.Contains(h, ":") {
		return "", errors.New("secrets are bound to hosts, not ports; drop the :PORT")
	}
	if suffix, ok := strings.CutPrefix(h, "*."); ok {
		n, err := policy.NormalizeName(suffix)
		if err != nil {
			return "", fmt.Errorf("after *.: %w", err)
		}
		if !strings.Contains(n, ".") {
			return "", fmt.Errorf("*.%s covers every host under a top-level domain; name the domain, as in *.example.%s", n, n)
		}
		if policy.SpansPublicSuffix(n) {
			return "", fmt.Errorf("*.%s covers every host under a public suffix (Public Suffix List), where anyone can register or host a name; name the domain, as in *.example.%s", n, n)
		}
		return "*." + n, nil
	}
	if strings.Contains(h, "*") {
		return "", errors.New("a wildcard may only be a whole leading label, as in *.example.com")
	}
	return policy.NormalizeName(h)
}

// canonHost turns the host a request goes to ("API.x.com", "x.com:443", "[::1]:8080",
// "::ffff:1.2.3.4") into the form configured hosts are kept in.
func canonHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.WithZone("").Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// hostMatches matches a configured host (normalised; maybe "*.name") with the
// policy package's wildcard rule, so secrets and policy never disagree.
func hostMatches(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return policy.MatchPattern(suffix, host)
	}
	return host == pattern
}

// allowed reports whether the value may go to host (normalised by canonHost).
func (s *Secret) allowed(host string) bool {
	for _, p := range s.Hosts {
		if hostMatches(p, host) {
			return true
		}
	}
	return false
}

// String is "NAME@host,host[:body]" plus the start of the placeholder; never the value.
func (s Secret) String() string {
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteByte('@')
	b.WriteString(strings.Join(s.Hosts, ","))
	if s.InBody {
		b.WriteString(":body")
	}
	if s.Git != "" {
		b.WriteString(":git")
	}
	b.WriteString(" (")
	b.WriteString(shortPlaceholder(s.Placeholder))
	b.WriteByte(')')
	return b.String()
}

// GoString is for %#v; the value shows as <redacted>.
func (s Secret) GoString() string {
	return fmt.Sprintf("secrets.Secret{Name:%q, Hosts:%#v, Placeholder:%q, InBody:%t, value:<redacted>}",
		s.Name, s.Hosts, shortPlaceholder(s.Placeholder), s.InBody)
}

// Format makes every fmt verb (%v, %+v, %#v, %s, %q, %x, ...) print String or GoString,
// so no verb falls through to the fields.
func (s Secret) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		io.WriteString(f, s.GoString())
	case verb == 'q':
		io.WriteString(f, strconv.Quote(s.String()))
	default:
		io.WriteString(f, s.String())
	}
}

// MarshalJSON writes the public fields only.
func (s Secret) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name        string   `json:"name"`
		Hosts       []string `json:"hosts"`
		Placeholder string   `json:"placeholder"`
		InBody      bool     `json:"in_body,omitempty"`
	}{s.Name, s.Hosts, s.Placeholder, s.InBody})
}

// LogValue keeps log/slog on String whatever the handler.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// shortPlaceholder keeps logs readable and keeps whole placeholders out of them: a
// placeholder is not a credential, but there is no reason to spread it.
func shortPlaceholder(p string) string {
	i := strings.Index(p, Marker)
	if i < 0 {
		if len(p) > 8 {
			return p[:8] + "…"
		}
		return p
	}
	end := min(len(p), i+len(Marker)+4)
	if end == len(p) {
		return p
	}
	if i > maxPrefixLen {
		// A long (JWT-shaped) prefix of a rotating secret: its start is enough.
		return p[:16] + "…" + p[i:end] + "…"
	}
	return p[:end] + "…"
}

// Package suggest turns what a run was refused, as its audit log recorded
// it, into the smallest config that would have allowed it, and merges that
// into a project file. It never decides for anyone: the caller shows the
// result and asks.
package suggest

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"sync"

	"golang.org/x/net/idna"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
)

// Bounds on what Read takes from an audit log. The names in it were chosen
// by the sandbox, so the log is read as hostile input: bounded in bytes,
// records and distinct needs, and each name checked before it is kept.
const (
	MaxBytes   = 256 << 20 // read from all of a run's audit files together
	MaxRecords = 1_000_000 // records looked at
	MaxNeeds   = 500       // distinct needs kept (hosts, endpoints, tools, commands)
	maxSkipped = 20        // refused subjects that could not be used, kept to say so
	maxCount   = 1 << 30   // a record's Count is clamped to this
	maxPath    = 1024
	maxCommand = 1024
)

// Need kinds.
const (
	KindHost     = "host"
	KindEndpoint = "endpoint"
	KindTool     = "tool"
	KindCommand  = "command"
)

// Need is one thing a run was refused: a host and port, an endpoint, an
// MCP tool or a host command, with the records that asked for it.
type Need struct {
	Kind   string
	Host   string // host and endpoint: a checked, lower-case ASCII name
	Port   int    // host: the port (443 for a DNS answer)
	Method string // endpoint
	Path   string // endpoint
	Server string // tool: the MCP server's name
	Tool   string // tool: the tool's name
	// Command: the canonical command line (host commands).
	Command string
	// Asked: a host command no rule allowed outright that a person (or a
	// remembered decision) approved.
	Asked bool
	// PersonSaidNo: a person asked about it refused it (never suggested).
	PersonSaidNo bool
	// Records counts the records that asked for it, by "kind decision"
	// ("network deny", "dns deny", "http deny"...).
	Records map[string]int
}

// Total is how many records asked for n.
func (n *Need) Total() int {
	t := 0
	for _, c := range n.Records {
		t += c
	}
	return t
}

func (n *Need) key() string {
	return strings.Join([]string{n.Kind, n.Host, fmt.Sprint(n.Port), n.Method, n.Path, n.Server, n.Tool, n.Command}, "\x00")
}

// Needs is what Read found.
type Needs struct {
	List []*Need
	// Records is how many records were read; Truncated, whether a bound
	// stopped the reading (what was read is still used).
	Records   int
	Truncated bool
	// Network counts the records of the gateway (network, dns, http): none
	// means the run had no gateway to see what it tried.
	Network int
	// Unusable are refused subjects that cannot be written as a rule (a
	// wildcard, a control character, an address), quoted, at most 20.
	Unusable []string
	// Dropped counts unusable ones past those 20, and needs past MaxNeeds.
	Dropped int

	byKey map[string]*Need
	// saidNo are hosts a person refused when asked.
	saidNo map[string]bool
	bytes  int64 // read so far, over every call of Read
}

var errEnough = errors.New("suggest: enough records")

// readLimit and byteLimit are MaxRecords and MaxBytes (a test lowers them).
var readLimit, byteLimit = MaxRecords, int64(MaxBytes)

// Read reads audit records (JSON lines, one or several files' worth) and
// collects what was refused: connections and DNS names no rule covered,
// requests endpoint rules did not allow, MCP tools no rule named, host
// commands no rule matched or a person was asked about. Corrupt lines are
// skipped. Over all its calls (a run's rotated files) it reads at most
// MaxBytes and MaxRecords.
func (ns *Needs) Read(r io.Reader) error {
	if ns.byKey == nil {
		ns.byKey = map[string]*Need{}
		ns.saidNo = map[string]bool{}
	}
	lr := &io.LimitedReader{R: r, N: byteLimit - ns.bytes}
	err := audit.Read(lr, func(rec audit.Record) error {
		if ns.Records >= readLimit {
			ns.Truncated = true
			return errEnough
		}
		ns.Records++
		ns.add(rec)
		return nil
	}, func(int, error) {})
	ns.bytes = byteLimit - lr.N
	if lr.N <= 0 {
		ns.Truncated = true
	}
	if errors.Is(err, errEnough) {
		return nil
	}
	return err
}

// add files one record under the need it asks for, if it asks for one.
func (ns *Needs) add(rec audit.Record) {
	n := 1
	if rec.Count > 1 {
		n = min(rec.Count, maxCount)
	}
	what := rec.Kind + " " + rec.Decision
	if rec.Kind == audit.KindNetwork || rec.Kind == audit.KindDNS || rec.Kind == audit.KindHTTP {
		ns.Network++
	}
	switch rec.Kind {
	case audit.KindNetwork, audit.KindDNS:
		if (rec.Decision != audit.Deny && rec.Decision != audit.Ask) || !hostRefusal(rec.Rule) {
			return // allowed, failed, or refused for what no allow rule changes (an address class)
		}
		port := rec.Port
		if rec.Kind == audit.KindDNS {
			port = 443 // a name: its bare rule covers 80 and 443
		}
		h, err := CheckHost(rec.Host)
		if err != nil || port <= 0 || port > 65535 {
			ns.unusable(rec.Host)
			return
		}
		if port == 80 {
			port = 443 // one bare rule covers both
		}
		ns.put(&Need{Kind: KindHost, Host: h, Port: port}, what, n)
	case audit.KindHTTP:
		if rec.Decision != audit.Deny || rec.Rule != "endpoint rules" {
			return
		}
		h, err1 := CheckHost(rec.Host)
		m, p, err2 := checkRequest(rec.Method, rec.Path)
		if err1 != nil || err2 != nil {
			ns.unusable(rec.Host + " " + rec.Method + " " + rec.Path)
			return
		}
		ns.put(&Need{Kind: KindEndpoint, Host: h, Method: m, Path: p}, what, n)
	case audit.KindMCP:
		if rec.Decision != audit.Deny || (rec.Rule != "unknown tool" && rec.Rule != "no matching rule") {
			return
		}
		srv, tool := rec.Extra["server"], rec.Extra["tool"]
		if !serverRE().MatchString(srv) || len(srv) > 64 || !toolRE().MatchString(tool) || len(tool) > 128 {
			ns.unusable(rec.Subject)
			return
		}
		ns.put(&Need{Kind: KindTool, Server: srv, Tool: tool}, what, n)
	case audit.KindApproval:
		// A person's no to a host: the host is not suggested.
		if by := rec.Extra["by"]; rec.Decision == audit.Deny && rec.Host != "" && by != "" && by != "timeout" && len(ns.saidNo) < MaxNeeds {
			if h, err := CheckHost(rec.Host); err == nil {
				ns.saidNo[h] = true
			}
		}
	case audit.KindHostExec:
		if rec.Op != "decide" {
			return
		}
		by := rec.Extra["by"]
		person := strings.HasPrefix(by, "human:") || strings.HasPrefix(by, "remembered:")
		if person && rec.Decision == audit.Deny && !strings.HasSuffix(by, ":timeout") {
			if checkCommand(rec.Subject) == nil {
				ns.put(&Need{Kind: KindCommand, Command: rec.Subject, PersonSaidNo: true}, "hostexec refused by a person", n)
			}
			return
		}
		asked := person && rec.Decision == audit.Allow
		// Refused because no rule matched, or by auto_deny (kept, so
		// Suggest can say the deny still holds); not for a reason no rule
		// changes (the binary was not found, the workspace mode).
		refused := rec.Decision == audit.Deny && by == "auto" && (rec.Rule == "" && rec.Reason == "no rule matches" || strings.HasPrefix(rec.Reason, "matches auto_deny "))
		if !asked && !refused {
			return
		}
		if err := checkCommand(rec.Subject); err != nil {
			ns.unusable(rec.Subject)
			return
		}
		what = "hostexec " + rec.Decision
		if asked {
			what = "hostexec asked"
		}
		ns.put(&Need{Kind: KindCommand, Command: rec.Subject, Asked: asked}, what, n)
	}
}

// hostRefusal reports whether a connection or name refused under rule was
// refused by host rules: no rule covered it (default), or a deny rule did
// (kept, so Suggest can say the deny still holds).
func hostRefusal(rule string) bool {
	switch rule {
	case "", "invalid", "broker", "gateway", "explicit", "udp":
		return false
	}
	return !strings.HasPrefix(rule, "class:")
}

func (ns *Needs) put(n *Need, what string, count int) {
	k := n.key()
	cur := ns.byKey[k]
	if cur == nil {
		if len(ns.List) >= MaxNeeds {
			ns.Dropped++
			ns.Truncated = true
			return
		}
		n.Records = map[string]int{}
		ns.byKey[k] = n
		ns.List = append(ns.List, n)
		cur = n
	}
	cur.Asked = cur.Asked || n.Asked
	cur.PersonSaidNo = cur.PersonSaidNo || n.PersonSaidNo
	cur.Records[what] = min(cur.Records[what]+count, maxCount)
}

func (ns *Needs) unusable(s string) {
	q := Quote(s)
	for _, u := range ns.Unusable {
		if u == q {
			return
		}
	}
	if len(ns.Unusable) >= maxSkipped {
		ns.Dropped++
		return
	}
	ns.Unusable = append(ns.Unusable, q)
}

// Quote writes s for a terminal or a YAML comment: Go-quoted, control
// characters and invalid UTF-8 escaped, at most 120 bytes of it.
func Quote(s string) string {
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return fmt.Sprintf("%+q", s)
}

// Compiled at first use, not at every airlock start.
var (
	serverRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`) })
	// A tool name as MCP servers name them; no glob characters, which a
	// rule would read as a pattern.
	toolRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$`) })
)

// CheckHost returns the name a rule for host would name, or why there is
// none: it must be a plain DNS name in ASCII (punycode that IDNA's lookup
// profile accepts as it is), not a pattern, an address, or airlock.internal.
func CheckHost(host string) (string, error) {
	if len(host) == 0 || len(host) > 253 {
		return "", errors.New("not a host name")
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '*' || c == ':' || c == '/' || c == '@' || c == ',' {
			return "", fmt.Errorf("character %q is not in a host name", c)
		}
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return "", errors.New("an address, not a name")
	}
	n, err := policy.NormalizeName(host)
	if err != nil {
		return "", err
	}
	if policy.IsBroker(n) {
		return "", errors.New("airlock's own broker")
	}
	a, err := idna.Lookup.ToASCII(n)
	if err != nil || a != n {
		return "", fmt.Errorf("not a valid IDNA name")
	}
	if !strings.Contains(n, ".") {
		return "", errors.New("a single label")
	}
	return n, nil
}

// checkRequest checks an endpoint's method and path: a method of letters,
// and a path that an endpoint rule matches exactly (no *, query, space or
// control character).
func checkRequest(method, path string) (string, string, error) {
	if method == "" || len(method) > 32 {
		return "", "", errors.New("bad method")
	}
	for i := 0; i < len(method); i++ {
		if c := method[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '-' || c == '_') {
			return "", "", errors.New("bad method")
		}
	}
	if !strings.HasPrefix(path, "/") || len(path) > maxPath {
		return "", "", errors.New("bad path")
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c >= 0x7f || c == '*' || c == '?' || c == '#' || c == '"' || c == '\\' {
			return "", "", errors.New("bad path")
		}
	}
	rule := "example.com " + strings.ToUpper(method) + " " + path
	if _, err := policy.New(policy.Config{Endpoints: []string{rule}}); err != nil {
		return "", "", err
	}
	return strings.ToUpper(method), path, nil
}

// checkCommand checks a canonical host command line: printable ASCII, not
// cut short by the audit log's cap.
func checkCommand(c string) error {
	if c == "" || len(c) > maxCommand || strings.HasSuffix(c, "…") {
		return errors.New("bad command")
	}
	for i := 0; i < len(c); i++ {
		if b := c[i]; b < ' ' || b >= 0x7f {
			return errors.New("bad command")
		}
	}
	return nil
}

// sortNeeds orders needs by kind, then name, for stable output.
func sortNeeds(l []*Need) {
	sort.SliceStable(l, func(i, j int) bool { return l[i].key() < l[j].key() })
}

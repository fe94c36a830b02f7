package suggest

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/net/publicsuffix"
	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/policy"
)

// Current is the config a suggestion must respect: what it allows now is
// not suggested again, and what it denies is never suggested (a deny from
// any source wins, so an allow under it would be overridden).
type Current struct {
	AllowHosts, TunnelHosts, DenyHosts, Endpoints []string
	// HostExecDeny are hostexec.auto_deny's regular expressions.
	HostExecDeny []string
	// Origin names where a rule of key came from ("~/.config/airlock/config.yaml:4"), or "".
	Origin func(key, rule string) string
	// FileEndpoints are the endpoint rules of the files a suggestion is
	// written to (Endpoints may hold the run's flags' too): a host with none
	// there would be limited to what is suggested for it.
	FileEndpoints []string
}

// Entry is one suggested setting, with the needs it answers.
type Entry struct {
	Key     string // network.allow_hosts, network.endpoints, hostexec.commands or mcp_servers
	Value   string // a host rule or an endpoint rule
	Command *config.HostCommand
	Server  string // mcp_servers: the server and tool to allow
	Tool    string
	Needs   []*Need
	Caveat  string // said after the comment
}

// Comment is the line said above e: which records asked for it, how often.
func (e *Entry) Comment() string {
	by := map[string]int{}
	total := 0
	var names []string
	for _, n := range e.Needs {
		for k, c := range n.Records {
			by[k] += c
			total += c
		}
		if e.Key == "network.allow_hosts" {
			names = append(names, n.Host)
		}
	}
	kinds := make([]string, 0, len(by))
	for k := range by {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for i, k := range kinds {
		kinds[i] = fmt.Sprintf("%s ×%d", k, by[k])
	}
	s := fmt.Sprintf("%d %s", total, plural(total, "record"))
	if len(names) > 1 {
		sort.Strings(names)
		names = dedupe(names)
		shown := names
		if len(shown) > 5 {
			shown = append(shown[:5:5], "…")
		}
		s += fmt.Sprintf(" for %d names (%s)", len(names), strings.Join(shown, ", "))
	}
	s += ": " + strings.Join(kinds, ", ")
	if e.Command != nil && e.Command.Ask {
		s += "; ask: a person still says yes each time (drop it to run unattended)"
	}
	if e.Caveat != "" {
		s += "; " + e.Caveat
	}
	return s
}

// Suggestion is the smallest config that would have allowed what a run
// was refused, and what was left out and why.
type Suggestion struct {
	Entries []Entry
	Notes   []string
}

// Empty reports whether nothing is suggested.
func (s *Suggestion) Empty() bool { return len(s.Entries) == 0 }

// Writable are the entries --write merges: MCP tools are shown only (see Render).
func (s *Suggestion) Writable() []Entry {
	var out []Entry
	for _, e := range s.Entries {
		if e.Key != "mcp_servers" {
			out = append(out, e)
		}
	}
	return out
}

// Suggest makes the smallest config that allows ns under cur. Hosts are
// suggested by exact name, except where two or more distinct names under
// one parent domain were refused and the Public Suffix List says that
// parent belongs to one registrant (never *.com, *.co.uk or *.github.io):
// then *.parent. Nothing a deny rule of cur covers is suggested.
func Suggest(ns *Needs, cur Current) (*Suggestion, error) {
	pol, err := policy.New(policy.Config{AllowHosts: cur.AllowHosts, Tunnels: cur.TunnelHosts, DenyHosts: cur.DenyHosts, Endpoints: cur.Endpoints})
	if err != nil {
		return nil, fmt.Errorf("suggest: the current config: %w", err)
	}
	origin := func(key, rule string) string {
		if cur.Origin != nil {
			if o := cur.Origin(key, rule); o != "" {
				return " (" + o + ")"
			}
		}
		return ""
	}
	files, err := policy.New(policy.Config{Endpoints: cur.FileEndpoints})
	if err != nil {
		return nil, fmt.Errorf("suggest: the current config: %w", err)
	}
	var denies []*regexp.Regexp
	for _, d := range cur.HostExecDeny {
		if re, err := regexp.Compile(d); err == nil {
			denies = append(denies, re)
		}
	}
	s := &Suggestion{}
	list := append([]*Need(nil), ns.List...)
	sortNeeds(list)
	var hosts []*Need
	for _, n := range list {
		recs := fmt.Sprintf("%d %s", n.Total(), plural(n.Total(), "record"))
		switch n.Kind {
		case KindHost:
			d := pol.Host(n.Host, uint16(n.Port))
			switch {
			case ns.saidNo[n.Host]:
				s.Notes = append(s.Notes, fmt.Sprintf("%s: a person refused it when asked; not suggested (%s)", hostPort(n), recs))
			case d.Verdict == policy.Allow:
				s.Notes = append(s.Notes, fmt.Sprintf("%s: allowed now by %s (%s)", hostPort(n), d.Rule, recs))
			case d.Verdict == policy.Deny && d.Rule != "default":
				s.Notes = append(s.Notes, fmt.Sprintf("%s: deny rule %s%s forbids it, so an allow would be overridden; not suggested (%s)", hostPort(n), d.Rule, origin("network.deny_hosts", d.Rule), recs))
			default:
				hosts = append(hosts, n)
			}
		case KindEndpoint:
			if d := pol.Endpoint(n.Host, n.Method, n.Path); d.Verdict == policy.Allow {
				s.Notes = append(s.Notes, fmt.Sprintf("%s %s %s: allowed now by %s (%s)", n.Host, n.Method, n.Path, d.Rule, recs))
				continue
			}
			e := Entry{Key: "network.endpoints", Value: n.Host + " " + n.Method + " " + n.Path, Needs: []*Need{n}}
			if files.Endpoint(n.Host, n.Method, n.Path).Rule == "no endpoint rules" {
				e.Caveat = "the config files have no endpoint rules for " + n.Host + " (the run's came from flags), so this one alone would limit it to what is listed"
			}
			s.Entries = append(s.Entries, e)
		case KindTool:
			s.Entries = append(s.Entries, Entry{Key: "mcp_servers", Server: n.Server, Tool: n.Tool, Needs: []*Need{n}})
		case KindCommand:
			if n.PersonSaidNo {
				s.Notes = append(s.Notes, fmt.Sprintf("host command %s: a person refused it when asked; not suggested (%s)", Quote(n.Command), recs))
				continue
			}
			denied := ""
			for _, re := range denies {
				if re.MatchString(n.Command) {
					denied = re.String()
					break
				}
			}
			if denied != "" {
				s.Notes = append(s.Notes, fmt.Sprintf("host command %s: auto_deny %s%s forbids it, so an allow would be overridden; not suggested (%s)", Quote(n.Command), Quote(denied), origin("hostexec.auto_deny", denied), recs))
				continue
			}
			c := &config.HostCommand{Match: "^" + regexp.QuoteMeta(n.Command) + "$", Ask: !n.Asked}
			s.Entries = append(s.Entries, Entry{Key: "hostexec.commands", Command: c, Needs: []*Need{n}})
		}
	}
	s.Entries = append(hostEntries(hosts), s.Entries...)
	if len(ns.Unusable) > 0 {
		s.Notes = append(s.Notes, "refused, but not something a rule should name: "+strings.Join(ns.Unusable, ", "))
	}
	if ns.Dropped > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%d more refusals were left out (past the bounds on what is read)", ns.Dropped))
	}
	if ns.Truncated {
		s.Notes = append(s.Notes, fmt.Sprintf("the audit log was read only in part (%d records, at most %d MiB)", ns.Records, MaxBytes>>20))
	}
	// The result must parse as config does and allow what it says it does.
	after := cur
	for _, e := range s.Entries {
		switch e.Key {
		case "network.allow_hosts":
			after.AllowHosts = append(after.AllowHosts, e.Value)
		case "network.endpoints":
			after.Endpoints = append(after.Endpoints, e.Value)
		}
	}
	pol2, err := policy.New(policy.Config{AllowHosts: after.AllowHosts, Tunnels: cur.TunnelHosts, DenyHosts: cur.DenyHosts, Endpoints: after.Endpoints})
	if err != nil {
		return nil, fmt.Errorf("suggest: the suggestion does not make a valid policy: %w", err)
	}
	for _, e := range s.Entries {
		for _, n := range e.Needs {
			ok := true
			switch n.Kind {
			case KindHost:
				ok = pol2.Host(n.Host, uint16(n.Port)).Verdict == policy.Allow
			case KindEndpoint:
				ok = pol2.Endpoint(n.Host, n.Method, n.Path).Verdict == policy.Allow
			}
			if !ok {
				return nil, fmt.Errorf("suggest: %s would not allow %s", e.Value, hostPort(n))
			}
		}
	}
	return s, nil
}

// hostEntries groups refused hosts into allow_hosts entries: *.parent for
// two or more names under a parent one registrant owns, else each name.
func hostEntries(hosts []*Need) []Entry {
	byParent := map[string][]*Need{}
	var out []Entry
	for _, n := range hosts {
		if n.Port != 443 {
			out = append(out, Entry{Key: "network.allow_hosts", Value: fmt.Sprintf("%s:%d", n.Host, n.Port), Needs: []*Need{n}})
			continue
		}
		_, parent, _ := strings.Cut(n.Host, ".")
		byParent[parent] = append(byParent[parent], n)
	}
	parents := make([]string, 0, len(byParent))
	for p := range byParent {
		parents = append(parents, p)
	}
	sort.Strings(parents)
	taken := map[*Need]bool{}
	for _, p := range parents {
		ns := byParent[p]
		if len(ns) >= 2 && Wildcardable(p) {
			// The parent itself, if refused too, is covered (*.p matches the apex).
			all := ns
			for _, q := range hosts {
				if q.Port == 443 && q.Host == p && !taken[q] {
					all = append(all, q)
				}
			}
			for _, q := range all {
				taken[q] = true
			}
			out = append(out, Entry{Key: "network.allow_hosts", Value: "*." + p, Needs: all})
		}
	}
	for _, p := range parents {
		for _, n := range byParent[p] {
			if !taken[n] {
				taken[n] = true
				out = append(out, Entry{Key: "network.allow_hosts", Value: n.Host, Needs: []*Need{n}})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.TrimPrefix(out[i].Value, "*.") < strings.TrimPrefix(out[j].Value, "*.")
	})
	return out
}

// Wildcardable reports whether *.parent may be suggested: parent is a
// registrable domain or a name under one (example.com, eu.example.co.uk),
// not a public suffix of either section of the Public Suffix List (com,
// co.uk, github.io) nor a name the list does not know.
func Wildcardable(parent string) bool {
	if !strings.Contains(parent, ".") || policy.SpansPublicSuffix(parent) {
		return false
	}
	reg, err := publicsuffix.EffectiveTLDPlusOne(parent)
	if err != nil {
		return false
	}
	return parent == reg || strings.HasSuffix(parent, "."+reg)
}

func hostPort(n *Need) string {
	if n.Port == 443 || n.Port == 0 {
		return n.Host
	}
	return fmt.Sprintf("%s:%d", n.Host, n.Port)
}

func plural(n int, w string) string {
	if n == 1 {
		return w
	}
	return w + "s"
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// scalar writes s as a YAML scalar that reads back as s.
func scalar(s string) string {
	b, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// Render writes s in the project file's shape: each entry under a comment
// saying which records asked for it; MCP tools and notes as comments.
func Render(w io.Writer, s *Suggestion) error {
	var b strings.Builder
	section := ""
	for _, key := range []string{"network.allow_hosts", "network.endpoints", "hostexec.commands"} {
		first := true
		for _, e := range s.Entries {
			if e.Key != key {
				continue
			}
			sec, name, _ := strings.Cut(key, ".")
			if first {
				if sec != section {
					b.WriteString(sec + ":\n")
					section = sec
				}
				b.WriteString("  " + name + ":\n")
				first = false
			}
			b.WriteString("    # " + e.Comment() + "\n")
			if e.Command != nil {
				fmt.Fprintf(&b, "    - match: %s\n", scalar(e.Command.Match))
				if e.Command.Ask {
					b.WriteString("      ask: true\n")
				}
				continue
			}
			b.WriteString("    - " + scalar(e.Value) + "\n")
		}
	}
	var tools []Entry
	for _, e := range s.Entries {
		if e.Key == "mcp_servers" {
			tools = append(tools, e)
		}
	}
	if len(tools) > 0 {
		b.WriteString("# MCP tools (not merged by --write: mcp_servers is one mapping per file, so a\n# project file's server would replace the global file's): add to the server's rules:\n")
		b.WriteString("# mcp_servers:\n")
		srv := ""
		for _, e := range tools {
			if e.Server != srv {
				fmt.Fprintf(&b, "#   %s:\n#     rules:\n", e.Server)
				srv = e.Server
			}
			fmt.Fprintf(&b, "#       # %s\n#       - {tool: %s, allow: always}\n", e.Comment(), scalar(e.Tool))
		}
	}
	if len(s.Notes) > 0 {
		b.WriteString("# Not suggested:\n")
		for _, n := range s.Notes {
			b.WriteString("#   " + n + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package config

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// lit is a number or bool, written as is.
type lit string

// values is s in the config file's shape, keyed as the schema is.
func values(s Spec) map[string]any {
	m := map[string]any{}
	put := func(k string, v any, set bool) {
		if set {
			m[k] = v
		}
	}
	put("backend", s.Backend, s.Backend != "")
	put("image", s.Image, s.Image != "")
	put("home", s.Home, s.Home != "")
	put("env", s.Env, len(s.Env) > 0)
	put("mounts.ro", s.RO, len(s.RO) > 0)
	put("mounts.rw", s.RW, len(s.RW) > 0)
	put("limits.memory", FormatSize(s.Limits.MemoryBytes), s.Limits.MemoryBytes > 0)
	put("limits.cpus", lit(strconv.FormatFloat(s.Limits.CPUs, 'g', -1, 64)), s.Limits.CPUs > 0)
	put("limits.pids", lit(strconv.FormatInt(s.Limits.Pids, 10)), s.Limits.Pids > 0)
	put("limits.tmp_size", FormatSize(s.Limits.TmpBytes), s.Limits.TmpBytes > 0)
	put("limits.timeout", formatDuration(s.Limits.Timeout), s.Limits.Timeout > 0)
	n := s.Network
	put("network.mode", n.Mode, n.Mode != "")
	put("network.allow_hosts", n.AllowHosts, len(n.AllowHosts) > 0)
	put("network.tunnel_hosts", n.TunnelHosts, len(n.TunnelHosts) > 0)
	put("network.deny_hosts", n.DenyHosts, len(n.DenyHosts) > 0)
	put("network.endpoints", n.Endpoints, len(n.Endpoints) > 0)
	put("network.add_hosts", n.AddHosts, len(n.AddHosts) > 0)
	put("network.upstream_ca", n.UpstreamCA, n.UpstreamCA != "")
	put("network.dns_upstream", n.DNSUpstream, n.DNSUpstream != "")
	put("secrets", n.Secrets, len(n.Secrets) > 0)
	w := s.Workspace
	put("workspace.mode", w.Mode, w.Mode != "")
	put("workspace.exclude", w.Exclude, len(w.Exclude) > 0)
	put("workspace.protect_git", lit(strconv.FormatBool(w.ProtectGit)), true)
	put("workspace.no_delete", lit(strconv.FormatBool(w.NoDelete)), true)
	put("workspace.auto_apply", lit(strconv.FormatBool(w.AutoApply)), true)
	put("workspace.apply_risky", lit(strconv.FormatBool(w.ApplyRisky)), true)
	put("audit.max_size", FormatSize(s.Audit.MaxBytes), s.Audit.MaxBytes > 0)
	put("audit.keep", lit(strconv.Itoa(s.Audit.Keep)), s.Audit.Keep > 0)
	put("approvals.mode", s.Approvals.Mode, s.Approvals.Mode != "")
	put("approvals.timeout", lit(s.Approvals.Timeout.String()), s.Approvals.Timeout > 0)
	put("approvals.decisions", s.Approvals.Decisions, s.Approvals.Decisions != "")
	put("hostexec.commands", s.HostExec.Commands, len(s.HostExec.Commands) > 0)
	put("hostexec.auto_approve", s.HostExec.AutoApprove, len(s.HostExec.AutoApprove) > 0)
	put("hostexec.ask", s.HostExec.Ask, len(s.HostExec.Ask) > 0)
	put("hostexec.auto_deny", s.HostExec.AutoDeny, len(s.HostExec.AutoDeny) > 0)
	put("hostexec.timeout", lit(s.HostExec.Timeout.String()), s.HostExec.Timeout > 0)
	put("hostexec.allow_copy_mode", lit(strconv.FormatBool(s.HostExec.AllowCopyMode)), s.HostExec.AllowCopyMode)
	put("budget.tokens", lit(strconv.FormatInt(s.Budget.Tokens, 10)), s.Budget.Tokens > 0)
	put("budget.usd", lit(strconv.FormatFloat(s.Budget.USD, 'g', -1, 64)), s.Budget.USD > 0)
	if len(s.Budget.Prices) > 0 {
		prices := map[string]map[string]float64{}
		for g, p := range s.Budget.Prices {
			prices[g] = map[string]float64{"input": p.Input, "output": p.Output, "cache_read": p.CacheRead, "cache_write": p.CacheWrite}
		}
		put("budget.prices", prices, true)
	}
	put("mcp_servers", s.MCPServers, s.MCPServers != nil)
	put("agents", s.Agents, s.Agents != nil)
	return m
}

// Show writes s in the config file's form (YAML); with origins, each value
// is followed by a comment saying where it came from.
func Show(w io.Writer, s Spec, origins Origins) error {
	vals := values(s)
	var b strings.Builder
	section := ""
	for _, f := range schema {
		v, ok := vals[f.key]
		if !ok {
			continue
		}
		parent, name, indent := "", f.key, ""
		if i := strings.LastIndexByte(f.key, '.'); i >= 0 {
			parent, name, indent = f.key[:i], f.key[i+1:], "  "
		}
		if parent != section {
			if parent != "" {
				b.WriteString(parent + ":\n")
			}
			section = parent
		}
		org := origins[f.key]
		comment := func(i int) string {
			if origins == nil || i >= len(org) {
				return ""
			}
			return "  # " + org[i].String()
		}
		switch v := v.(type) {
		case lit:
			fmt.Fprintf(&b, "%s%s: %s%s\n", indent, name, v, comment(0))
		case string:
			fmt.Fprintf(&b, "%s%s: %s%s\n", indent, name, quote(v), comment(0))
		case []string:
			fmt.Fprintf(&b, "%s%s:\n", indent, name)
			for i, e := range v {
				fmt.Fprintf(&b, "%s  - %s%s\n", indent, quote(e), comment(i))
			}
		default: // a reserved section, as given
			out, err := yaml.Marshal(map[string]any{name: v})
			if err != nil {
				return err
			}
			text := strings.TrimRight(string(out), "\n")
			first, rest, _ := strings.Cut(text, "\n")
			b.WriteString(indent + first + comment(0) + "\n")
			if rest != "" {
				b.WriteString(indent + strings.ReplaceAll(rest, "\n", "\n"+indent) + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// quote writes s as a YAML scalar that reads back as the same string.
func quote(s string) string {
	var n yaml.Node
	if yaml.Unmarshal([]byte(s), &n) == nil && len(n.Content) == 1 && n.Content[0].Kind == yaml.ScalarNode &&
		n.Content[0].Value == s && n.Content[0].Style == 0 && !strings.ContainsAny(s, "#\n") &&
		(n.Content[0].Tag == "!!str" || isNumeric(s)) {
		return s
	}
	return strconv.Quote(s)
}

// formatDuration writes 30m, not 30m0s.
func formatDuration(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

func isNumeric(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

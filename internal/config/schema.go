package config

import (
	"sort"
	"strings"
	"sync"
)

// kind is how a key's value is read and merged.
type kind int

const (
	kString   kind = iota
	kEnum          // a string from field.enum
	kBool          //
	kInt           // a non-negative integer
	kFloat         // a non-negative number
	kSize          // 512m, 4g, or bytes
	kDuration      // 90s, 30m
	kPath          // ~/ expands; relative to the file's directory
	kList          // strings; layers union
	kPathList      // paths; layers union
	kEnv           // NAME or NAME=VALUE (or a mapping); a later NAME replaces
	kSecrets       // structured or --secret form; a later NAME replaces
	kPrices        // a mapping MODEL_GLOB: {input, output, cache_read, cache_write}; layers merge by glob
	kCommands      // host-command entries {match, ask, grants...}; layers union
	kRaw           // reserved: parsed, kept, not interpreted
	kSection       // a mapping of further keys
)

// field is one key of the config file's schema.
type field struct {
	key  string // dotted: "network.allow_hosts"
	kind kind
	enum []string
	help string // what is expected, for errors and the template
	host bool   // list items are host rules (checked by the policy package)
}

// schema is every key a config file may hold. Reserved sections parse but do
// nothing yet.
var schema = []field{
	{key: "version", kind: kInt, help: "the schema version, 1"},
	{key: "project", kind: kString, help: "the project directory a project file belongs to"},
	{key: "backend", kind: kEnum, enum: []string{BackendNative, BackendDocker, BackendVM}},
	{key: "image", kind: kString, help: "a docker image name"},
	{key: "home", kind: kPath, help: "a directory kept as the sandbox's home"},
	{key: "env", kind: kEnv, help: "a list of NAME or NAME=VALUE, or a mapping NAME: VALUE"},
	{key: "mounts", kind: kSection},
	{key: "mounts.ro", kind: kPathList, help: "a list of paths"},
	{key: "mounts.rw", kind: kPathList, help: "a list of paths"},
	{key: "limits", kind: kSection},
	{key: "limits.memory", kind: kSize, help: "a size such as 512m or 4g"},
	{key: "limits.cpus", kind: kFloat, help: "a number of CPUs such as 1.5"},
	{key: "limits.pids", kind: kInt, help: "a number of processes"},
	{key: "limits.tmp_size", kind: kSize, help: "a size such as 512m or 4g"},
	{key: "limits.timeout", kind: kDuration, help: "a duration such as 90s or 30m"},
	{key: "network", kind: kSection},
	{key: "network.mode", kind: kEnum, enum: []string{ModeAuto, ModeTransparent, ModeProxy}},
	{key: "network.allow_hosts", kind: kList, host: true, help: "a list of hosts: example.com, *.example.com, host:port"},
	{key: "network.tunnel_hosts", kind: kList, host: true, help: "a list of hosts reached through a blind TLS tunnel, not intercepted: example.com, *.example.com, host:port (also written in allow_hosts as {host: example.com, intercept: false})"},
	{key: "network.deny_hosts", kind: kList, host: true, help: "a list of hosts: example.com, *.example.com, host:port"},
	{key: "network.endpoints", kind: kList, help: "a list of 'HOST METHOD /path/*'"},
	{key: "network.add_hosts", kind: kList, help: "a list of NAME:IP"},
	{key: "network.upstream_ca", kind: kPath, help: "a PEM file"},
	{key: "network.dns_upstream", kind: kString, help: "IP:PORT"},
	{key: "secrets", kind: kSecrets, help: "a list of {name, from: env|file|command|github_app, env|file|command|github_app, hosts, body, git}"},
	{key: "workspace", kind: kSection},
	{key: "workspace.mode", kind: kEnum, enum: []string{WorkspaceBind, WorkspaceOverlay, WorkspaceCopy}},
	{key: "workspace.exclude", kind: kList, help: "a list of names or paths"},
	{key: "workspace.protect_git", kind: kBool},
	{key: "workspace.no_delete", kind: kBool},
	{key: "workspace.auto_apply", kind: kBool},
	{key: "workspace.apply_risky", kind: kBool},
	{key: "audit", kind: kSection},
	{key: "audit.max_size", kind: kSize, help: "a size such as 100m"},
	{key: "audit.keep", kind: kInt, help: "a number of rotated files"},
	{key: "approvals", kind: kSection, help: "ask or deny, or a mapping of mode, timeout, decisions"},
	{key: "approvals.mode", kind: kEnum, enum: []string{ApprovalsAsk, ApprovalsDeny}},
	{key: "approvals.timeout", kind: kDuration, help: "a duration such as 60s or 5m"},
	{key: "approvals.decisions", kind: kPath, help: "a prepared decisions file"},
	{key: "hostexec", kind: kSection},
	{key: "hostexec.commands", kind: kCommands, help: "a list of {match, ask, allow_hosts, secrets, ro, rw, ssh_agent}"},
	{key: "hostexec.auto_approve", kind: kList, help: "a list of regular expressions over the command line"},
	{key: "hostexec.ask", kind: kList, help: "a list of regular expressions over the command line"},
	{key: "hostexec.auto_deny", kind: kList, help: "a list of regular expressions over the command line"},
	{key: "hostexec.timeout", kind: kDuration, help: "a duration such as 60s or 5m"},
	{key: "hostexec.allow_copy_mode", kind: kBool},
	{key: "budget", kind: kSection},
	{key: "budget.tokens", kind: kInt, help: "a number of tokens (input, output and cache, all counted)"},
	{key: "budget.usd", kind: kFloat, help: "an amount of US dollars such as 2.50"},
	{key: "budget.prices", kind: kPrices, help: "a mapping MODEL_GLOB: {input, output, cache_read, cache_write} in USD per million tokens"},
	{key: "mcp_servers", kind: kRaw},
	{key: "agents", kind: kRaw},
}

// commandKeys are the keys of one hostexec.commands entry: the match, and
// what the command's own sandbox is granted.
var commandKeys = []string{"match", "ask", "allow_hosts", "secrets", "ro", "rw", "ssh_agent"}

// secretKeys are the keys of one structured secret.
var secretKeys = []string{"name", "from", "env", "file", "command", "github_app", "hosts", "body", "prefix", "git"}

// appKeys are a secret's github_app keys.
var appKeys = []string{"app_id", "installation_id", "private_key", "repositories", "permissions", "api"}

var fields = sync.OnceValue(func() map[string]*field {
	m := map[string]*field{}
	for i := range schema {
		m[schema[i].key] = &schema[i]
	}
	return m
})

// lookup returns the schema entry for a dotted key, or nil.
func lookup(key string) *field { return fields()[key] }

// expected says what a key takes, for errors.
func (f *field) expected() string {
	switch f.kind {
	case kEnum:
		return "use " + orList(f.enum)
	case kBool:
		return "expected true or false"
	case kSection:
		return "expected a mapping of keys"
	}
	if f.help != "" {
		return "expected " + f.help
	}
	return "expected a string"
}

func orList(s []string) string {
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// children are the keys directly under section ("" for the top level).
func children(section string) []string {
	var out []string
	for _, f := range schema {
		parent, name := "", f.key
		if i := strings.LastIndexByte(f.key, '.'); i >= 0 {
			parent, name = f.key[:i], f.key[i+1:]
		}
		if parent == section {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// suggest finds the likeliest meant key for an unknown name in section: a
// close spelling among its siblings, or the same name in another section.
func suggest(section, name string, siblings []string) string {
	best, bestD := "", 3
	for _, s := range siblings {
		if d := distance(strings.ToLower(name), s); d < bestD {
			best, bestD = s, d
		}
	}
	if best != "" {
		return best
	}
	norm := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	for _, f := range schema {
		last := f.key[strings.LastIndexByte(f.key, '.')+1:]
		if last == norm || last == norm+"s" || last+"s" == norm {
			return f.key
		}
	}
	return ""
}

// distance is the Levenshtein distance between a and b (short keys only).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

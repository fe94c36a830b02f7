package config

import (
	"fmt"
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
	// to is where Merge puts the key's value in a Spec: a *string, *bool,
	// *int64, *int, *float64, *time.Duration, *[]string, *[]secrets.Spec, *[]HostCommand,
	// *map[string]Price or *any (nil for sections and file-only keys).
	to func(*Spec) any
	// toAgent is to for an agents.* key: where in that agent's settings.
	toAgent func(*Agent) any
	// always: config show writes the key even at its zero value (a bool
	// whose default is true).
	always bool
	// flag is the run flag that sets the key as the last layer ("" for
	// none); cmd/airlock defines it from RunFlags: its one-letter short
	// form and its help (a `WORD` names the value).
	flag, short, usage string
	// secret: the values may hold tokens; config show writes their names
	// only, and kEnv names are header names (letters, digits, -, _).
	secret bool
	// def is the key's default (the Defaults layer, and the run flag's
	// default as shown); nil for none.
	def any
}

// schema is every key a config file may hold. Reserved sections parse but do
// nothing yet.
var schema = []field{
	{key: "version", kind: kInt, help: "the schema version, 1"},
	{key: "project", kind: kString, help: "the project directory a project file belongs to"},
	{key: "backend", kind: kEnum, enum: []string{BackendNative, BackendDocker, BackendVM, BackendKubernetes}, to: func(s *Spec) any { return &s.Backend }, flag: "backend", usage: "where the sandbox runs: native (namespaces on this kernel), docker (a hardened container; see airlock images), vm (a QEMU micro-VM; see airlock images build --format vm) or kubernetes (a Pod of the kubeconfig's cluster)", def: BackendNative},
	{key: "image", kind: kString, help: "a docker image name", to: func(s *Spec) any { return &s.Image }, flag: "image", usage: "docker and kubernetes backends: the image to run in (default " + DefaultImage + ")"},
	{key: "kubernetes", kind: kSection},
	{key: "kubernetes.context", kind: kString, help: "a kubeconfig context", to: func(s *Spec) any { return &s.Kubernetes.Context }, flag: "kube-context", usage: "kubernetes backend: the kubeconfig's `CONTEXT` (default: its current one)"},
	{key: "kubernetes.namespace", kind: kString, help: "a namespace", to: func(s *Spec) any { return &s.Kubernetes.Namespace }, flag: "kube-namespace", usage: "kubernetes backend: the `NAMESPACE` of the sandbox's Pod (default: the context's)"},
	{key: "kubernetes.runtime_class", kind: kString, help: "a RuntimeClass name such as gvisor", to: func(s *Spec) any { return &s.Kubernetes.RuntimeClass }},
	{key: "kubernetes.image", kind: kString, help: "an image whose /airlock is airlock's static binary", to: func(s *Spec) any { return &s.Kubernetes.Image }},
	{key: "kubernetes.node_selector", kind: kList, help: "a list of KEY=VALUE node labels", to: func(s *Spec) any { return &s.Kubernetes.NodeSelector }},
	{key: "kubernetes.ready_timeout", kind: kDuration, help: "a duration such as 90s or 5m", to: func(s *Spec) any { return &s.Kubernetes.ReadyTimeout }},
	{key: "kubernetes.labels", kind: kList, help: "a list of KEY=VALUE labels for the Pod", to: func(s *Spec) any { return &s.Kubernetes.Labels }},
	{key: "home", kind: kPath, help: "a directory kept as the sandbox's home", to: func(s *Spec) any { return &s.Home }, flag: "home", usage: "keep the sandbox's home directory in `DIR` across runs (default: an empty private home)"},
	{key: "env", kind: kEnv, help: "a list of NAME or NAME=VALUE, or a mapping NAME: VALUE", to: func(s *Spec) any { return &s.Env }, flag: "env", short: "e", usage: "pass host variable `NAME`, or set NAME=VALUE (repeatable; nothing else passes but PATH, locale and terminal settings)"},
	{key: "mounts", kind: kSection},
	{key: "mounts.ro", kind: kPathList, help: "a list of paths", to: func(s *Spec) any { return &s.RO }, flag: "ro", usage: "also expose `PATH` read-only (repeatable)"},
	{key: "mounts.rw", kind: kPathList, help: "a list of paths", to: func(s *Spec) any { return &s.RW }, flag: "rw", usage: "also make `PATH` writable (repeatable)"},
	{key: "limits", kind: kSection},
	{key: "limits.memory", kind: kSize, help: "a size such as 512m or 4g", to: func(s *Spec) any { return &s.Limits.MemoryBytes }, flag: "memory", short: "m", usage: "memory limit, e.g. 512m, 4g (default: half of RAM)"},
	{key: "limits.cpus", kind: kFloat, help: "a number of CPUs such as 1.5", to: func(s *Spec) any { return &s.Limits.CPUs }, flag: "cpus", usage: "CPU limit in CPUs, e.g. 1.5 (default: none)"},
	{key: "limits.pids", kind: kInt, help: "a number of processes", to: func(s *Spec) any { return &s.Limits.Pids }, flag: "pids", usage: "maximum number of processes and threads the commands may have", def: int64(DefaultPids)},
	{key: "limits.tmp_size", kind: kSize, help: "a size such as 512m or 4g", to: func(s *Spec) any { return &s.Limits.TmpBytes }, flag: "tmp-size", usage: "size of the private /tmp and home (default: the memory limit)"},
	{key: "limits.timeout", kind: kDuration, help: "a duration such as 90s or 30m", to: func(s *Spec) any { return &s.Limits.Timeout }, flag: "timeout", usage: "stop the sandbox after this long, e.g. 90s, 30m (exit status 124)"},
	{key: "limits.idle_timeout", kind: kDuration, help: "a duration such as 90s or 30m", to: func(s *Spec) any { return &s.Limits.IdleTimeout }, flag: "idle-timeout", usage: "stop the sandbox once nothing used it for this long: no command running (exec, an attached terminal) and no network activity, e.g. 10m (exit status 124)"},
	{key: "limits.max_sandboxes", kind: kInt, help: "a number of sandboxes", to: func(s *Spec) any { return &s.Limits.MaxSandboxes }, flag: "max-sandboxes", usage: "refuse to start when this user already runs this many sandboxes (default: no cap)"},
	{key: "network", kind: kSection},
	{key: "network.mode", kind: kEnum, enum: []string{ModeAuto, ModeTransparent, ModeProxy}, to: func(s *Spec) any { return &s.Network.Mode }, flag: "network-mode", usage: "how traffic reaches the gateway: transparent (a network interface; needs access to /dev/net/tun), proxy (HTTP(S)_PROXY), or auto", def: ModeAuto},
	{key: "network.allow_hosts", kind: kList, host: true, help: "a list of hosts: example.com, *.example.com, host:port", to: func(s *Spec) any { return &s.Network.AllowHosts }, flag: "allow-host", usage: "let the sandbox reach `HOST`: example.com or *.example.com (ports 80/443, HTTPS intercepted), host:port or host:* (raw TCP) (repeatable)"},
	{key: "network.tunnel_hosts", kind: kList, host: true, help: "a list of hosts reached through a blind TLS tunnel, not intercepted: example.com, *.example.com, host:port (also written in allow_hosts as {host: example.com, intercept: false})", to: func(s *Spec) any { return &s.Network.TunnelHosts }, flag: "tunnel-host", usage: "let the sandbox reach `HOST` (port 443, or host:port) through a blind TLS tunnel: not intercepted, so no secret or endpoint rule may apply to it; the TLS server name must be HOST (repeatable)"},
	{key: "network.deny_hosts", kind: kList, host: true, help: "a list of hosts: example.com, *.example.com, host:port", to: func(s *Spec) any { return &s.Network.DenyHosts }, flag: "deny-host", usage: "never reach `HOST`, whatever allows it (same forms; repeatable)"},
	{key: "network.endpoints", kind: kList, help: "a list of 'HOST METHOD /path/*'", to: func(s *Spec) any { return &s.Network.Endpoints }, flag: "allow-endpoint", usage: "only these requests to a host: 'HOST METHOD /path/*' (repeatable; other requests to HOST get 403)"},
	{key: "network.add_hosts", kind: kList, help: "a list of NAME:IP", to: func(s *Spec) any { return &s.Network.AddHosts }, flag: "add-host", usage: "resolve `NAME:IP` statically (also allows that private address)"},
	{key: "network.upstream_ca", kind: kPath, help: "a PEM file", to: func(s *Spec) any { return &s.Network.UpstreamCA }, flag: "upstream-ca", usage: "also trust this PEM `FILE` for upstream servers"},
	{key: "network.policy_script", kind: kPath, help: "a Starlark file on the host", to: func(s *Spec) any { return &s.Network.PolicyScript }, flag: "policy-script", usage: "decide hosts, requests and responses with the Starlark `FILE`'s is_host_allowed(host, port), on_request(req) and on_response(resp) (deny rules still win; see README, Policy scripts)"},
	{key: "network.dns_upstream", kind: kString, help: "IP:PORT", to: func(s *Spec) any { return &s.Network.DNSUpstream }, flag: "dns-upstream", usage: "resolve allowed names with the DNS server at `IP:PORT` (default: the host's resolver)"},
	{key: "secrets", kind: kSecrets, help: "a list of {name, from: env|file|command|github_app, env|file|command|github_app, hosts, body, git}", to: func(s *Spec) any { return &s.Network.Secrets }, flag: "secret", usage: "keep a credential on the host: NAME@HOST[,HOST] takes $NAME; the sandbox sees a placeholder that the gateway swaps for the value only toward HOST (also NAME=file:PATH@HOST, NAME=cmd:COMMAND@HOST; :body to swap in bodies)"},
	{key: "ports", kind: kList, help: "a list of [HOST_IP:]HOST_PORT:SANDBOX_PORT", to: func(s *Spec) any { return &s.Ports }, flag: "publish", short: "p", usage: "open the sandbox's TCP port to the host as `[HOST_IP:]HOST_PORT:SANDBOX_PORT`: HOST_IP is 127.0.0.1 unless named; SANDBOX_PORT alone takes a free host port (airlock port NAME shows it); a way in only: it needs a network (--allow-host, --ask) and lets the sandbox reach nothing more (repeatable)"},
	{key: "workspace", kind: kSection},
	{key: "workspace.mode", kind: kEnum, enum: []string{WorkspaceBind, WorkspaceOverlay, WorkspaceCopy}, to: func(s *Spec) any { return &s.Workspace.Mode }, flag: "workspace-mode", usage: "how the workspace appears inside: bind, overlay or copy (see above)", def: WorkspaceBind},
	{key: "workspace.exclude", kind: kList, help: "a list of names or paths", to: func(s *Spec) any { return &s.Workspace.Exclude }, flag: "exclude", usage: "leave `PATTERN` out of the copy, the manifest and the apply: a name (node_modules, *.o) or a path from the workspace root (build/out) (repeatable)"},
	{key: "workspace.protect_git", kind: kBool, always: true, to: func(s *Spec) any { return &s.Workspace.ProtectGit }, flag: "protect-git", usage: "bind: pin .git and keep what git reads to run or read elsewhere read-only inside; after exit restore it and defuse git dirs the run made or changed", def: true},
	{key: "workspace.no_delete", kind: kBool, always: true, to: func(s *Spec) any { return &s.Workspace.NoDelete }, flag: "no-delete", usage: "forbid deleting or renaming files in the workspace (needs Landlock; a workspace inside /tmp or the home makes those no-delete too)", def: false},
	{key: "workspace.undo_size", kind: kSize, help: "a size such as 512m or 4g", to: func(s *Spec) any { return &s.Workspace.UndoBytes }},
	{key: "workspace.auto_apply", kind: kBool, always: true, to: func(s *Spec) any { return &s.Workspace.AutoApply }, flag: "auto-apply", usage: "overlay and copy: apply the changes at exit without asking, except risky ones", def: false},
	{key: "workspace.apply_risky", kind: kBool, always: true, to: func(s *Spec) any { return &s.Workspace.ApplyRisky }, flag: "apply-risky", usage: "with --auto-apply: apply risky changes too", def: false},
	{key: "filesystem", kind: kSection},
	{key: "filesystem.hide", kind: kList, help: "a list of gitignore-style patterns relative to the workspace (.env, *.pem, config/*.key, **/prod/) or absolute paths", to: func(s *Spec) any { return &s.Filesystem.Hide }, flag: "hide", usage: "never show what matches `PATTERN` inside: a gitignore-style glob relative to the workspace (.env, *.pem, secrets/, **/prod/*.key) or an absolute host path; masked on every backend, never copied, diffed or applied (repeatable; built in: " + strings.Join(DefaultHide, " ") + ", see --no-hide)", def: DefaultHide},
	{key: "filesystem.hide_defaults", kind: kBool, always: true, to: func(s *Spec) any { return &s.Filesystem.HideDefaults }, def: true},
	{key: "audit", kind: kSection},
	{key: "audit.max_size", kind: kSize, help: "a size such as 100m", to: func(s *Spec) any { return &s.Audit.MaxBytes }},
	{key: "audit.keep", kind: kInt, help: "a number of rotated files", to: func(s *Spec) any { return &s.Audit.Keep }},
	{key: "audit.otlp", kind: kSection},
	{key: "audit.otlp.endpoint", kind: kString, help: "an OTLP/HTTP collector's base URL such as https://otel.example.com:4318", to: func(s *Spec) any { return &s.Audit.OTLP.Endpoint }},
	{key: "audit.otlp.headers", kind: kEnv, secret: true, help: "a mapping HEADER: VALUE sent to the collector", to: func(s *Spec) any { return &s.Audit.OTLP.Headers }},
	{key: "audit.otlp.insecure", kind: kBool, to: func(s *Spec) any { return &s.Audit.OTLP.Insecure }},
	{key: "approvals", kind: kSection, help: "ask or deny, or a mapping of mode, timeout, decisions"},
	{key: "approvals.mode", kind: kEnum, enum: []string{ApprovalsAsk, ApprovalsDeny}, to: func(s *Spec) any { return &s.Approvals.Mode }},
	{key: "approvals.timeout", kind: kDuration, help: "a duration such as 60s or 5m", to: func(s *Spec) any { return &s.Approvals.Timeout }, flag: "ask-timeout", usage: "with --ask: deny what nobody answered after this long (default 60s)"},
	{key: "approvals.decisions", kind: kPath, help: "a prepared decisions file", to: func(s *Spec) any { return &s.Approvals.Decisions }, flag: "decisions", usage: "with --ask and nobody to ask: decisions prepared in `FILE` (the saved-decisions format); what it does not cover is denied"},
	{key: "hostexec", kind: kSection},
	{key: "hostexec.commands", kind: kCommands, help: "a list of {match, ask, allow_hosts, secrets, ro, rw, ssh_agent}", to: func(s *Spec) any { return &s.HostExec.Commands }},
	{key: "hostexec.auto_approve", kind: kList, help: "a list of regular expressions over the command line", to: func(s *Spec) any { return &s.HostExec.AutoApprove }},
	{key: "hostexec.ask", kind: kList, help: "a list of regular expressions over the command line", to: func(s *Spec) any { return &s.HostExec.Ask }},
	{key: "hostexec.auto_deny", kind: kList, help: "a list of regular expressions over the command line", to: func(s *Spec) any { return &s.HostExec.AutoDeny }},
	{key: "hostexec.timeout", kind: kDuration, help: "a duration such as 60s or 5m", to: func(s *Spec) any { return &s.HostExec.Timeout }},
	{key: "hostexec.allow_copy_mode", kind: kBool, to: func(s *Spec) any { return &s.HostExec.AllowCopyMode }},
	{key: "terminal", kind: kSection},
	{key: "terminal.detach_keys", kind: kString, help: "keys such as ctrl-p,ctrl-q", to: func(s *Spec) any { return &s.Terminal.DetachKeys }, flag: "detach-keys", usage: "with -t -d: the `KEYS` that leave airlock attach with the command running (comma-separated: a character or ctrl-X)", def: "ctrl-p,ctrl-q"},
	{key: "terminal.ask_keys", kind: kString, help: "keys such as ctrl-p,ctrl-a", to: func(s *Spec) any { return &s.Terminal.AskKeys }, flag: "ask-keys", usage: "with -t --ask: the `KEYS` that open the approval prompt over the command's screen", def: "ctrl-p,ctrl-a"},
	{key: "budget", kind: kSection},
	{key: "budget.tokens", kind: kInt, help: "a number of tokens (input, output and cache, all counted)", to: func(s *Spec) any { return &s.Budget.Tokens }, flag: "budget-tokens", usage: "refuse LLM API requests (Anthropic, OpenAI, Gemini) once the sandbox has used `N` tokens, cache included (default: no limit)"},
	{key: "budget.usd", kind: kFloat, help: "an amount of US dollars such as 2.50", to: func(s *Spec) any { return &s.Budget.USD }, flag: "budget-usd", usage: "refuse LLM API requests once the sandbox has spent `X` US dollars, priced per model (config budget.prices over a built-in table; default: no limit)"},
	{key: "budget.prices", kind: kPrices, help: "a mapping MODEL_GLOB: {input, output, cache_read, cache_write} in USD per million tokens", to: func(s *Spec) any { return &s.Budget.Prices }},
	{key: "mcp_servers", kind: kRaw, to: func(s *Spec) any { return &s.MCPServers }},
	{key: "agents", kind: kSection, help: "a mapping of default: NAME and, per agent, NAME: {keys, hosts, args, limits, budget, backend, image}"},
	{key: "agents.default", kind: kString, help: "an agent's name, such as claude", to: func(s *Spec) any { return &s.Agents.Default }},
	// agents.* are one agent's settings (agents.claude.hosts); * stands for
	// the agent's name. They apply to that agent's runs (see Loaded.ApplyAgent).
	{key: "agents.*", kind: kSection},
	{key: "agents.*.keys", kind: kList, help: "a list of the agent's key variables, such as ANTHROPIC_API_KEY", toAgent: func(a *Agent) any { return &a.Keys }},
	{key: "agents.*.hosts", kind: kList, host: true, help: "a list of hosts: example.com, *.example.com, host:port", toAgent: func(a *Agent) any { return &a.Hosts }},
	{key: "agents.*.args", kind: kList, help: "a list of the agent's own arguments", toAgent: func(a *Agent) any { return &a.Args }},
	{key: "agents.*.limits", kind: kSection},
	{key: "agents.*.limits.memory", kind: kSize, help: "a size such as 512m or 4g", toAgent: func(a *Agent) any { return &a.Limits.MemoryBytes }},
	{key: "agents.*.limits.cpus", kind: kFloat, help: "a number of CPUs such as 1.5", toAgent: func(a *Agent) any { return &a.Limits.CPUs }},
	{key: "agents.*.limits.pids", kind: kInt, help: "a number of processes", toAgent: func(a *Agent) any { return &a.Limits.Pids }},
	{key: "agents.*.limits.timeout", kind: kDuration, help: "a duration such as 90s or 30m", toAgent: func(a *Agent) any { return &a.Limits.Timeout }},
	{key: "agents.*.budget", kind: kSection},
	{key: "agents.*.budget.tokens", kind: kInt, help: "a number of tokens", toAgent: func(a *Agent) any { return &a.Budget.Tokens }},
	{key: "agents.*.budget.usd", kind: kFloat, help: "an amount of US dollars such as 2.50", toAgent: func(a *Agent) any { return &a.Budget.USD }},
	{key: "agents.*.backend", kind: kEnum, enum: []string{BackendNative, BackendDocker, BackendVM}, toAgent: func(a *Agent) any { return &a.Backend }},
	{key: "agents.*.image", kind: kString, help: "a docker image name", toAgent: func(a *Agent) any { return &a.Image }},
}

// agentKeys maps each agents.* setting to the top-level key it stands in
// for in that agent's runs.
var agentKeys = map[string]string{
	"limits.memory": "limits.memory", "limits.cpus": "limits.cpus", "limits.pids": "limits.pids", "limits.timeout": "limits.timeout",
	"budget.tokens": "budget.tokens", "budget.usd": "budget.usd", "backend": "backend", "image": "image",
}

// generic is key with an agent's name replaced by * (agents.claude.hosts
// is agents.*.hosts); other keys are themselves.
func generic(key string) string {
	rest, ok := strings.CutPrefix(key, "agents.")
	if !ok {
		return key
	}
	name, tail, _ := strings.Cut(rest, ".")
	if name == "default" || name == "*" {
		return key
	}
	if tail == "" {
		return "agents.*"
	}
	return "agents.*." + tail
}

// agentOf is the agent a concrete agents.NAME... key is about, or "".
func agentOf(key string) string {
	if generic(key) == key {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(key, "agents."), ".")
	return name
}

// wild reports whether f is one of agents.*.
func (f *field) wild() bool { return strings.HasPrefix(f.key, "agents.*") }

// RunFlag is a run flag that sets a config key: its name, one-letter
// short form, help, default as shown, and the kind of value it takes.
type RunFlag struct {
	Flag, Key, Short, Usage, Default string
	// List: the flag repeats; Bool, Int, Float, Duration: its value's type
	// (none: a string).
	List, Bool, Int, Float, Duration bool
}

// RunFlags are the run flags that are config keys, in the schema's order:
// set on the command line, they are the last layer over the config files.
func RunFlags() []RunFlag {
	var out []RunFlag
	for _, f := range schema {
		if f.flag != "" {
			k := f.kind
			def := ""
			if f.def != nil {
				def = fmt.Sprint(f.def)
			}
			out = append(out, RunFlag{Flag: f.flag, Key: f.key, Short: f.short, Usage: f.usage, Default: def,
				List: k == kList || k == kPathList || k == kEnv || k == kSecrets, Bool: k == kBool, Int: k == kInt, Float: k == kFloat, Duration: k == kDuration})
		}
	}
	return out
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
func lookup(key string) *field { return fields()[generic(key)] }

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
	section = generic(section)
	var out []string
	for _, f := range schema {
		parent, name := "", f.key
		if i := strings.LastIndexByte(f.key, '.'); i >= 0 {
			parent, name = f.key[:i], f.key[i+1:]
		}
		if parent == section && name != "*" {
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

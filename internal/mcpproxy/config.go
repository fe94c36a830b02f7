package mcpproxy

import (
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/mcppolicy"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// ServerConfig is one entry of mcp_servers: a stdio server (Command) that
// airlock runs in its own sandbox, or a remote one (URL).
type ServerConfig struct {
	Name    string
	Command []string          // stdio: argv, run inside its own airlock sandbox
	Env     map[string]string // stdio: set inside the server's sandbox (-e K=V)
	Cwd     string            // stdio: working directory (default: Roots[0])
	// Roots are the host directories the server may change: Roots[0] is its
	// sandbox's workspace, the rest --rw. They are also the policy's roots.
	Roots []string
	// RO are more host paths the server's sandbox may read: its own code
	// when that lies somewhere every sandbox has private (/tmp, the home).
	RO []string
	// Hide are host paths the server's sandbox never shows (--hide): set by
	// New from the protected paths and the deny rules, not read from config.
	Hide       []string
	AllowHosts []string       // stdio: the server sandbox's --allow-host
	Secrets    []secrets.Spec // stdio: the server sandbox's secrets (parsed once): never the agent's
	URL        string         // remote: a Streamable HTTP endpoint
	Secret     string         // remote: --secret form (NAME@HOST); sent as "Authorization: Bearer"
	Rules      []mcppolicy.Rule
	ShowDenied bool          // tools/list shows tools no rule can allow (default: hidden)
	Timeout    time.Duration // per call to the server (default 60 s); approvals wait apart
}

// nameRE with the length checked apart: a counted repetition ({0,63})
// compiles to 64 copies of the class, which every airlock process (the
// guest too) would pay for at start.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`) })

const maxNameLen = 64

// ParseServers reads mcp_servers from decoded YAML: a map of NAME to
//
//	command: [npx, -y, "@modelcontextprotocol/server-filesystem", /home/me/proj]
//	env: {KEY: value}
//	cwd: /home/me/proj
//	roots: [/home/me/proj]
//	allow_hosts: [api.github.com]
//	secrets: [GITHUB_TOKEN@api.github.com]
//	rules: [...]            # mcppolicy.ParseRules
//	show_denied: false
//	timeout: 60s
//
// or, for a remote server, url and secret (with rules, show_denied, timeout).
// Errors name the server and the key. The result is sorted by name.
func ParseServers(raw any) ([]ServerConfig, error) {
	if raw == nil {
		return nil, nil
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("mcp_servers: want a map of server name to settings, got %T", raw)
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []ServerConfig
	for _, n := range names {
		s, err := parseServer(n, m[n])
		if err != nil {
			return nil, fmt.Errorf("mcp_servers: %s: %w", n, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseServer(name string, raw any) (ServerConfig, error) {
	s := ServerConfig{Name: name}
	if len(name) > maxNameLen || !nameRE().MatchString(name) {
		return s, fmt.Errorf("the name must be letters, digits, '.', '_' or '-' (at most 64)")
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return s, fmt.Errorf("want a map of settings, got %T", raw)
	}
	var err error
	for k, v := range m {
		switch k {
		case "command":
			s.Command, err = stringList(v)
		case "env":
			s.Env, err = stringMap(v)
		case "cwd":
			s.Cwd, err = str(v)
		case "roots":
			s.Roots, err = stringList(v)
		case "ro":
			s.RO, err = stringList(v)
		case "allow_hosts":
			s.AllowHosts, err = stringList(v)
		case "secrets":
			var flags []string
			flags, err = stringList(v)
			for _, f := range flags {
				sp, perr := secrets.ParseSpec(f)
				if perr != nil {
					err = perr
					break
				}
				s.Secrets = append(s.Secrets, sp)
			}
		case "url":
			s.URL, err = str(v)
		case "secret":
			s.Secret, err = str(v)
		case "rules":
			s.Rules, err = mcppolicy.ParseRules(v)
		case "show_denied":
			b, ok := v.(bool)
			if !ok {
				err = fmt.Errorf("want true or false, got %T", v)
			}
			s.ShowDenied = b
		case "timeout":
			s.Timeout, err = duration(v)
		default:
			return s, fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return s, fmt.Errorf("%s: %w", k, err)
		}
	}
	switch {
	case len(s.Command) == 0 && s.URL == "":
		return s, fmt.Errorf("needs command (a stdio server) or url (a remote one)")
	case len(s.Command) > 0 && s.URL != "":
		return s, fmt.Errorf("command and url: choose one")
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, fmt.Errorf("url: want an http(s) URL, got %q", s.URL)
		}
		if len(s.Env) > 0 || s.Cwd != "" || len(s.AllowHosts) > 0 || len(s.Secrets) > 0 {
			return s, fmt.Errorf("env, cwd, allow_hosts and secrets are for stdio servers (command), not url")
		}
	case s.Secret != "":
		return s, fmt.Errorf("secret is for remote servers (url); a stdio server takes secrets")
	}
	for i, r := range s.Roots {
		if !filepath.IsAbs(r) {
			return s, fmt.Errorf("roots[%d]: want an absolute path, got %q", i, r)
		}
		s.Roots[i] = filepath.Clean(r)
	}
	for i, r := range s.RO {
		if !filepath.IsAbs(r) {
			return s, fmt.Errorf("ro[%d]: want an absolute path, got %q", i, r)
		}
		s.RO[i] = filepath.Clean(r)
	}
	if s.Cwd != "" && !filepath.IsAbs(s.Cwd) {
		return s, fmt.Errorf("cwd: want an absolute path, got %q", s.Cwd)
	}
	if s.Timeout < 0 {
		return s, fmt.Errorf("timeout: must not be negative")
	}
	return s, nil
}

func str(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %T", v)
	}
	return s, nil
}

func stringList(v any) ([]string, error) {
	switch l := v.(type) {
	case []string:
		return l, nil
	case []any:
		out := make([]string, len(l))
		for i, x := range l {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("[%d]: want a string, got %T", i, x)
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a list of strings, got %T", v)
}

func stringMap(v any) (map[string]string, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a map, got %T", v)
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		switch x := x.(type) {
		case string:
			out[k] = x
		case int, int64, float64, bool:
			out[k] = fmt.Sprint(x)
		default:
			return nil, fmt.Errorf("%s: want a string, got %T", k, x)
		}
	}
	return out, nil
}

func duration(v any) (time.Duration, error) {
	switch d := v.(type) {
	case string:
		return time.ParseDuration(d)
	case int:
		return time.Duration(d) * time.Second, nil
	case float64:
		return time.Duration(d * float64(time.Second)), nil
	}
	return 0, fmt.Errorf("want a duration such as 30s, got %T", v)
}

package supervisor

import (
	"fmt"
	"strings"
)

// passedEnv are host variables that carry no secrets and that tools need to
// behave (locale, terminal, colour). Everything else stays out unless --env
// names it: tokens and keys live in ordinary variables.
var passedEnv = map[string]bool{
	"PATH": true, "USER": true, "LOGNAME": true, "LANG": true, "LANGUAGE": true,
	"TERM": true, "COLORTERM": true, "TZ": true, "NO_COLOR": true, "FORCE_COLOR": true,
	"CLICOLOR": true, "CLICOLOR_FORCE": true, "COLUMNS": true, "LINES": true,
}

// SandboxEnv builds the sandbox's environment from the host's: the allowlist,
// then HOME/TMPDIR pointing inside, then each --env (NAME takes the host's
// value, NAME=VALUE sets one). Later entries win.
func SandboxEnv(host []string, home, id string, extra []string) ([]string, []string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	hostVal := map[string]string{}
	for _, kv := range host {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		hostVal[k] = v
		if passedEnv[k] || strings.HasPrefix(k, "LC_") {
			set(k, v)
		}
	}
	if _, ok := vars["PATH"]; !ok {
		set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	set("HOME", home)
	set("TMPDIR", "/tmp")
	set("AIRLOCK_SANDBOX", id)
	var warnings []string
	for _, e := range extra {
		k, v, hasValue := strings.Cut(e, "=")
		if !validEnvName(k) {
			return nil, nil, fmt.Errorf("--env %q: a variable name is letters, digits and _ , not starting with a digit", e)
		}
		if !hasValue {
			hv, ok := hostVal[k]
			if !ok {
				warnings = append(warnings, fmt.Sprintf("--env %s: not set on the host, so not set inside", k))
				continue
			}
			v = hv
		}
		set(k, v)
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, warnings, nil
}

func validEnvName(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for _, c := range k {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// mergeEnv overlays extra NAME=VALUE entries on base.
func mergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	out := append([]string(nil), base...)
	for _, e := range extra {
		k, _, _ := strings.Cut(e, "=")
		replaced := false
		for i, b := range out {
			if strings.HasPrefix(b, k+"=") {
				out[i], replaced = e, true
				break
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

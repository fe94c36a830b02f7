package config

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
// then HOME/TMPDIR pointing inside, then each --env (see EnvFlags). Later
// entries win.
func SandboxEnv(host []string, home, id string, extra []string) ([]string, []string, error) {
	var env []string
	for _, kv := range host {
		if k, _, ok := strings.Cut(kv, "="); ok && (passedEnv[k] || strings.HasPrefix(k, "LC_")) {
			env = MergeEnv(env, []string{kv})
		}
	}
	if _, ok := LookupEnv(env, "PATH"); !ok {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	env = MergeEnv(env, []string{"HOME=" + home, "TMPDIR=/tmp", "AIRLOCK_SANDBOX=" + id})
	flags, warnings, err := EnvFlags(host, extra)
	if err != nil {
		return nil, nil, err
	}
	return MergeEnv(env, flags), warnings, nil
}

// EnvFlags resolves --env entries against the host's environment: NAME takes
// the host's value (left out, with a warning, when the host has none) and
// NAME=VALUE sets one.
func EnvFlags(host, flags []string) (set, warnings []string, err error) {
	for _, e := range flags {
		k, _, hasValue := strings.Cut(e, "=")
		if !ValidEnvName(k) {
			return nil, nil, fmt.Errorf("--env %q: a variable name is letters, digits and _ , not starting with a digit", e)
		}
		if hasValue {
			set = append(set, e)
			continue
		}
		v, ok := LookupEnv(host, k)
		if !ok {
			warnings = append(warnings, fmt.Sprintf("--env %s: not set on the host, so not set inside", k))
			continue
		}
		set = append(set, k+"="+v)
	}
	return set, warnings, nil
}

// LookupEnv finds k in env (the last entry wins, as for the kernel's getenv users).
func LookupEnv(env []string, k string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v, true
		}
	}
	return "", false
}

// ValidEnvName reports whether k is a portable variable name ([A-Za-z_][A-Za-z0-9_]*).
func ValidEnvName(k string) bool {
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

// MergeEnv returns base with extra's NAME=VALUE entries set over it.
func MergeEnv(base, extra []string) []string {
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

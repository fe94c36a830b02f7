package config

import (
	"fmt"
	"slices"
	"strconv"
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

// AppendOptions returns extra with its value of k (a list of options, such
// as JAVA_TOOL_OPTIONS) put after base's, so that merging extra over base
// keeps the user's options and adds airlock's (which win where both set
// the same one: the JVM takes the last). An extra whose value already
// holds base's (an environment handed back) is left as it is.
func AppendOptions(base, extra []string, k string) []string {
	b, ok := LookupEnv(base, k)
	if !ok || strings.TrimSpace(b) == "" {
		return extra
	}
	out := append([]string(nil), extra...)
	for i, e := range out {
		if v, ok := strings.CutPrefix(e, k+"="); ok && !strings.Contains(v, b) {
			out[i] = k + "=" + b + " " + v
		}
	}
	return out
}

// MergeEnv returns base with extra's NAME=VALUE entries set over it. git's
// environment config (GIT_CONFIG_COUNT, GIT_CONFIG_KEY_n, GIT_CONFIG_VALUE_n)
// is a numbered list, not one variable per setting: when both sides hold
// one, extra's entries follow base's (git lets later entries win), so
// neither the user's nor airlock's settings are lost. An extra that already
// starts with base's list (an environment handed back) is taken whole.
func MergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	bg, bok := gitConfigOf(base)
	eg, eok := gitConfigOf(extra)
	if bok && eok {
		if !hasPrefix(eg, bg) {
			eg = append(bg, eg...)
		}
		out := mergePlain(withoutGitConfig(base), withoutGitConfig(extra))
		return append(out, GitConfigEnv(eg)...)
	}
	return mergePlain(base, extra)
}

func mergePlain(base, extra []string) []string {
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

// maxGitConfig bounds the entries read from GIT_CONFIG_COUNT.
const maxGitConfig = 10000

// gitConfigOf reads env's git environment config; ok is false without a
// well-formed one (git itself refuses a count whose entries are missing).
func gitConfigOf(env []string) (pairs [][2]string, ok bool) {
	c, ok := LookupEnv(env, "GIT_CONFIG_COUNT")
	if !ok {
		return nil, false
	}
	n, err := strconv.Atoi(c)
	if err != nil || n < 0 || n > maxGitConfig {
		return nil, false
	}
	vars := map[string]string{} // later wins, as in LookupEnv
	for _, e := range env {
		if k, v, ok := strings.Cut(e, "="); ok && strings.HasPrefix(k, "GIT_CONFIG_") {
			vars[k] = v
		}
	}
	for i := range n {
		k, kok := vars["GIT_CONFIG_KEY_"+strconv.Itoa(i)]
		v, vok := vars["GIT_CONFIG_VALUE_"+strconv.Itoa(i)]
		if !kok || !vok {
			return nil, false
		}
		pairs = append(pairs, [2]string{k, v})
	}
	return pairs, true
}

func hasPrefix(list, prefix [][2]string) bool {
	return len(list) >= len(prefix) && slices.Equal(list[:len(prefix)], prefix)
}

func withoutGitConfig(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "GIT_CONFIG_COUNT=") && !strings.HasPrefix(e, "GIT_CONFIG_KEY_") && !strings.HasPrefix(e, "GIT_CONFIG_VALUE_") {
			out = append(out, e)
		}
	}
	return out
}

// GitConfigEnv is pairs as git's environment config.
func GitConfigEnv(pairs [][2]string) []string {
	if len(pairs) == 0 {
		return nil
	}
	out := []string{"GIT_CONFIG_COUNT=" + strconv.Itoa(len(pairs))}
	for i, p := range pairs {
		out = append(out, "GIT_CONFIG_KEY_"+strconv.Itoa(i)+"="+p[0], "GIT_CONFIG_VALUE_"+strconv.Itoa(i)+"="+p[1])
	}
	return out
}

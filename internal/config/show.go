package config

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/secrets"
	"gopkg.in/yaml.v3"
)

// lit is a number or bool, written as is.
type lit string

// values is s in the config file's shape, keyed as the schema is: each
// key the schema puts in a Spec, unless it is unset; the keys in order.
func values(s Spec) (map[string]any, []string) {
	m := map[string]any{}
	var order []string
	for _, kf := range showKeys(s) {
		key, f := kf.key, kf.f
		var v any
		set := f.always
		switch p := f.dest(&s, key).(type) {
		case *string:
			v, set = *p, set || *p != ""
		case *[]string:
			v, set = *p, set || len(*p) > 0
			if f.secret {
				v = redactValues(*p)
			}
		case *bool:
			v, set = lit(strconv.FormatBool(*p)), set || *p
		case *int64:
			v, set = lit(strconv.FormatInt(*p, 10)), set || *p > 0
			if f.kind == kSize {
				v = FormatSize(*p)
			}
		case *int:
			v, set = lit(strconv.Itoa(*p)), set || *p > 0
		case *float64:
			v, set = lit(strconv.FormatFloat(*p, 'g', -1, 64)), set || *p > 0
		case *time.Duration:
			v, set = lit(formatDuration(*p)), set || *p > 0
		case *[]secrets.Spec:
			var flags []string
			for _, sp := range *p {
				flags = append(flags, sp.String())
			}
			v, set = flags, set || len(*p) > 0
		case *[]HostCommand:
			v, set = *p, set || len(*p) > 0
		case *map[string]Price:
			prices := map[string]map[string]float64{}
			for g, p := range *p {
				prices[g] = map[string]float64{"input": p.Input, "output": p.Output, "cache_read": p.CacheRead, "cache_write": p.CacheWrite}
			}
			v, set = prices, set || len(*p) > 0
		case *any:
			v, set = *p, set || *p != nil
		default:
			continue // a section
		}
		if set {
			m[key] = v
			order = append(order, key)
		}
	}
	return m, order
}

// redactValues keeps each NAME=VALUE's name: the values may be tokens.
func redactValues(items []string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		name, _, _ := strings.Cut(it, "=")
		out[i] = name + "=" + Redacted
	}
	return out
}

// Redacted stands for a value config show does not write.
const Redacted = "[redacted]"

type keyField struct {
	key string
	f   *field
}

// showKeys are the keys config show writes, in the schema's order; the
// agents.* keys once per agent of s, by name, each agent's together.
func showKeys(s Spec) []keyField {
	var names []string
	for n := range s.Agents.By {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []keyField
	done := false
	for i := range schema {
		f := &schema[i]
		if !f.wild() {
			out = append(out, keyField{f.key, f})
			continue
		}
		if done {
			continue
		}
		done = true
		for _, n := range names {
			for j := range schema {
				if g := &schema[j]; g.wild() {
					out = append(out, keyField{"agents." + n + strings.TrimPrefix(g.key, "agents.*"), g})
				}
			}
		}
	}
	return out
}

// Show writes s in the config file's form (YAML); with origins, each value
// is followed by a comment saying where it came from.
func Show(w io.Writer, s Spec, origins Origins) error {
	vals, order := values(s)
	var b strings.Builder
	var open []string // the sections written above, outermost first
	for _, key := range order {
		v := vals[key]
		parts := strings.Split(key, ".")
		name, sections := parts[len(parts)-1], parts[:len(parts)-1]
		same := 0
		for same < len(open) && same < len(sections) && open[same] == sections[same] {
			same++
		}
		for i := same; i < len(sections); i++ {
			b.WriteString(strings.Repeat("  ", i) + sections[i] + ":\n")
		}
		open = sections
		indent := strings.Repeat("  ", len(sections))
		org := origins[key]
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

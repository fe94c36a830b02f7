package config

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/secrets"
)

// DefaultPids is the process limit when none is set.
const DefaultPids = 1024

// Origins say where each effective value came from: one Origin for a scalar
// key ("limits.memory"), one per entry, in the Spec's order, for a list
// ("network.allow_hosts").
type Origins map[string][]Origin

// Defaults is the built-in layer, below every file.
func Defaults() *Layer {
	l := NewLayer(SourceDefault, "")
	o := Origin{Source: SourceDefault}
	for _, f := range schema {
		if list, ok := f.def.([]string); ok {
			st := &setting{origin: o}
			for _, v := range list {
				st.items = append(st.items, item{value: v, origin: o})
			}
			l.vals[f.key] = st
		} else if f.def != nil {
			l.vals[f.key] = &setting{v: f.def, origin: o}
		}
	}
	return l
}

// SetFlag sets key from a command-line flag's values (one, or several for a
// repeatable flag), parsed as a file's value would be. Relative paths stay
// relative to the current directory.
func (l *Layer) SetFlag(key, flag string, values []string) error {
	f := lookup(key)
	if f == nil || f.kind == kSection || f.kind == kRaw || f.kind == kPrices || f.kind == kCommands {
		return fmt.Errorf("config: no key %q for %s", key, flag)
	}
	o := Origin{Source: l.Source, Flag: flag}
	s := &setting{origin: o}
	one := ""
	if len(values) > 0 {
		one = values[len(values)-1]
	}
	bad := func(what string) error { return fmt.Errorf("%s %q: %s", flag, one, what) }
	switch f.kind {
	case kString:
		s.v = one
	case kEnum:
		if !contains(f.enum, one) {
			return bad(f.expected())
		}
		s.v = one
	case kBool:
		b, err := strconv.ParseBool(one)
		if err != nil {
			return bad(f.expected())
		}
		s.v = b
	case kInt:
		n, err := strconv.ParseInt(one, 0, 64)
		if err != nil {
			return bad(f.expected())
		}
		if n < 0 {
			return fmt.Errorf("%s must not be negative", flag)
		}
		s.v = n
	case kFloat:
		x, err := strconv.ParseFloat(one, 64)
		if err != nil {
			return bad(f.expected())
		}
		if x < 0 {
			return fmt.Errorf("%s must not be negative", flag)
		}
		s.v = x
	case kSize:
		if one == "" {
			return nil // --memory "" is the default
		}
		n, err := ParseSize(one)
		if err != nil {
			return fmt.Errorf("%s %v", flag, err)
		}
		s.v = n
	case kDuration:
		d, err := time.ParseDuration(one)
		if err != nil {
			return bad(f.expected())
		}
		if d < 0 {
			return fmt.Errorf("%s must not be negative", flag)
		}
		s.v = d
	case kPath:
		if one == "" {
			return nil
		}
		abs, err := filepath.Abs(one)
		if err != nil {
			return fmt.Errorf("%s %s: %v", flag, one, err)
		}
		s.v = abs
	case kList, kPathList, kEnv, kSecrets:
		for _, v := range values {
			it := item{value: v, origin: o}
			switch f.kind {
			case kEnv:
				it.key, _, _ = strings.Cut(v, "=")
			case kSecrets:
				it.key = secretName(v)
			}
			s.items = append(s.items, it)
		}
	}
	l.vals[key] = s
	return nil
}

// Merge folds layers, lowest precedence first, into one spec. A later layer's
// value replaces an earlier one's, except lists: allow and deny hosts,
// endpoints, mounts and excludes accumulate across every layer (so a deny,
// once anywhere, stays), and an env var or secret of the same NAME is
// replaced by the later layer's. The agents section merges the same way,
// key by key under each agent's name. Workspace.Path is left for the caller.
func Merge(layers ...*Layer) (Spec, Origins) {
	eff := map[string]*setting{}
	// Without the built-in hide patterns (--no-hide), the ones the user
	// gave stay, even one equal to a built-in.
	hideDefaults := true
	for _, l := range layers {
		if s, ok := l.lookup("filesystem.hide_defaults"); ok {
			hideDefaults = s.v == true
		}
	}
	for _, l := range layers {
		if l == nil {
			continue
		}
		for i := range schema {
			f := &schema[i]
			for _, key := range keysOf(f, l.vals) {
				s := l.vals[key]
				if key == "filesystem.hide" && l.Source == SourceDefault && !hideDefaults {
					continue
				}
				switch f.kind {
				case kPrices:
					// A later layer's price for a glob replaces the earlier one's.
					merged := map[string]Price{}
					if cur := eff[key]; cur != nil {
						maps.Copy(merged, cur.v.(map[string]Price))
					}
					maps.Copy(merged, s.v.(map[string]Price))
					eff[key] = &setting{v: merged, origin: s.origin}
				case kList, kPathList, kEnv, kSecrets, kCommands:
					cur := eff[key]
					if cur == nil {
						cur = &setting{}
						eff[key] = cur
					}
					for _, it := range s.items {
						cur.items = addItem(cur.items, it)
					}
				default:
					eff[key] = s
				}
			}
		}
	}
	var sp Spec
	or := Origins{}
	for i := range schema {
		f := &schema[i]
		for _, key := range keysOf(f, eff) {
			if os := assign(f, f.dest(&sp, key), eff[key]); os != nil {
				or[key] = os
			}
		}
	}
	return sp, or
}

// keysOf are the keys of vals f stands for: f.key itself, or for one of
// agents.* the same key under each agent's name, sorted.
func keysOf[V any](f *field, vals map[string]V) []string {
	if !f.wild() {
		if _, ok := vals[f.key]; ok {
			return []string{f.key}
		}
		return nil
	}
	var out []string
	for k := range vals {
		if generic(k) == f.key && k != f.key {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// dest is where key's value goes in sp (nil for sections and file-only keys).
func (f *field) dest(sp *Spec, key string) any {
	if f.toAgent != nil {
		return f.toAgent(sp.Agents.agent(agentOf(key)))
	}
	if f.to == nil {
		return nil
	}
	return f.to(sp)
}

// assign puts st's value in dst and returns its origins (nil when nothing
// was set).
func assign(f *field, dst any, st *setting) []Origin {
	if dst == nil || st == nil {
		return nil
	}
	if f.kind == kList || f.kind == kPathList || f.kind == kEnv || f.kind == kSecrets || f.kind == kCommands {
		if len(st.items) == 0 {
			return nil
		}
		var os []Origin
		for _, it := range st.items {
			switch dst := dst.(type) {
			case *[]string:
				*dst = append(*dst, it.value)
			case *[]secrets.Spec:
				sp, err := secrets.ParseSpec(it.value)
				if err != nil { // checked by the parser (CheckSecret)
					continue
				}
				*dst = append(*dst, sp)
			case *[]HostCommand:
				var c HostCommand
				if json.Unmarshal([]byte(it.value), &c) != nil { // written by the parser
					continue
				}
				*dst = append(*dst, c)
			}
			os = append(os, it.origin)
		}
		return os
	}
	switch dst := dst.(type) {
	case *string:
		*dst = st.v.(string)
	case *bool:
		*dst = st.v.(bool)
	case *int64:
		*dst = st.v.(int64)
	case *int:
		*dst = int(st.v.(int64))
	case *float64:
		*dst = st.v.(float64)
	case *time.Duration:
		*dst = st.v.(time.Duration)
	case *map[string]Price:
		*dst = st.v.(map[string]Price)
	case *any:
		*dst = st.v
	default:
		panic("config: schema key " + f.key + " has no known destination type")
	}
	return []Origin{st.origin}
}

// addItem appends it, dropping an equal entry (or, for keyed entries, the
// one of the same NAME) so the later layer's wins and its origin is kept.
func addItem(items []item, it item) []item {
	for i, x := range items {
		if (it.key != "" && x.key == it.key) || x.value == it.value {
			if x.value == it.value && x.key == it.key {
				return items // already there; the first origin stays
			}
			items = append(items[:i:i], items[i+1:]...)
			break
		}
	}
	return append(items, it)
}

// lookup is l's setting of key, if l is a layer and sets it.
func (l *Layer) lookup(key string) (*setting, bool) {
	if l == nil {
		return nil, false
	}
	s, ok := l.vals[key]
	return s, ok
}

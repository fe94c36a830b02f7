package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// ApplyAgent makes l the config of a run of the agent called name: the
// agent's hosts join network.allow_hosts (a deny rule from any source still
// wins over them), and its limits, budget, backend and image replace the
// top-level ones, being more particular, unless a flag set those (the
// command line is the last word). Origins follow the values. It returns
// the agent's settings, nil when it has none; its keys and args are the
// caller's to use.
func (l *Loaded) ApplyAgent(name string) *Agent {
	a := l.Spec.Agents.By[name]
	if a == nil {
		return nil
	}
	pre := "agents." + name + "."
	hostOrigins := l.Origins[pre+"hosts"]
	for i, h := range a.Hosts {
		if slices.Contains(l.Spec.Network.AllowHosts, h) {
			continue
		}
		l.Spec.Network.AllowHosts = append(l.Spec.Network.AllowHosts, h)
		if i < len(hostOrigins) {
			l.Origins["network.allow_hosts"] = append(l.Origins["network.allow_hosts"], hostOrigins[i])
		}
	}
	subs := make([]string, 0, len(agentKeys))
	for sub := range agentKeys {
		subs = append(subs, sub)
	}
	sort.Strings(subs)
	for _, sub := range subs {
		top := agentKeys[sub]
		from := l.Origins[pre+sub]
		if len(from) == 0 {
			continue
		}
		if cur := l.Origins[top]; len(cur) > 0 && cur[0].Source == SourceFlag {
			continue
		}
		src, dst := lookup(pre+sub).toAgent(a), lookup(top).to(&l.Spec)
		switch d := dst.(type) {
		case *string:
			*d = *src.(*string)
		case *int64:
			*d = *src.(*int64)
		case *float64:
			*d = *src.(*float64)
		case *time.Duration:
			*d = *src.(*time.Duration)
		default:
			panic(fmt.Sprintf("config: agents.*.%s and %s differ in type", sub, top))
		}
		l.Origins[top] = from
	}
	return a
}

// AgentNames are the agents the agents section has settings for, sorted.
func (a Agents) Names() []string {
	var out []string
	for n := range a.By {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// AgentOrigin names where agents.NAME (or agents.default) was set, for
// errors: "agents.claude (~/.config/airlock/config.yaml:7)".
func (l *Loaded) AgentOrigin(name string) string {
	key := "agents." + name
	if name == "default" {
		if o := l.Origins[key]; len(o) > 0 {
			return key + " (" + o[0].String() + ")"
		}
		return key
	}
	var keys []string
	for k := range l.Origins {
		if strings.HasPrefix(k, key+".") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) > 0 && len(l.Origins[keys[0]]) > 0 {
		o := l.Origins[keys[0]][0]
		if o.Source != SourceFlag && o.File != "" {
			return key + " (" + DisplayPath(o.File) + ")"
		}
	}
	return key
}

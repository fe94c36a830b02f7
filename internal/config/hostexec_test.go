package config

import (
	"strings"
	"testing"
)

func TestHostCommandEntriesParseAndAddUpAcrossFiles(t *testing.T) {
	global := mustParse(t, "hostexec:\n  commands:\n    - {match: '^git push( |$)', allow_hosts: [github.com], secrets: [GITHUB_TOKEN@github.com], ro: [/etc/gitconfig], ssh_agent: false}\n  auto_approve: ['^make$']\n")
	project := mustParse(t, "hostexec:\n  commands:\n    - match: '^docker build '\n      ask: true\n      rw: [/var/cache/x]\n      secrets: [{name: REG, from: env, hosts: [ghcr.io]}]\n  auto_deny: ['^rm ']\n")
	s, _ := Merge(Defaults(), global, project)
	h := s.HostExec
	if len(h.Commands) != 2 || h.Commands[0].Match != "^git push( |$)" || h.Commands[0].AllowHosts[0] != "github.com" ||
		h.Commands[0].Secrets[0].String() != "GITHUB_TOKEN@github.com" || h.Commands[0].RO[0] != "/etc/gitconfig" || h.Commands[0].Ask {
		t.Fatalf("commands %+v: want the global entry first, with its grants", h.Commands)
	}
	if c := h.Commands[1]; !c.Ask || c.RW[0] != "/var/cache/x" || c.Secrets[0].String() != "REG@ghcr.io" {
		t.Fatalf("project entry %+v: want ask, its rw path and secret", c)
	}
	if !h.Enabled() || !h.Asks() || len(h.AutoApprove) != 1 || len(h.AutoDeny) != 1 {
		t.Fatalf("hostexec %+v: want the plain lists beside the entries", h)
	}
	var b strings.Builder
	if err := Show(&b, s, nil); err != nil || !strings.Contains(b.String(), "allow_hosts:") || !strings.Contains(b.String(), "match: '^docker build '") {
		t.Fatalf("Show = %q, %v: want the entries in the file's shape", b.String(), err)
	}
	// A file with only an entry enables host commands.
	if s, _ := Merge(Defaults(), mustParse(t, "hostexec: {commands: [{match: '^x$'}]}\n")); !s.HostExec.Enabled() || s.HostExec.Asks() {
		t.Fatalf("one auto entry: enabled %v, asks %v", s.HostExec.Enabled(), s.HostExec.Asks())
	}
}

func TestHostCommandEntriesBadInput(t *testing.T) {
	cases := map[string]struct{ text, want string }{
		"an unknown grant key names the rule": {"hostexec: {commands: [{match: '^git push', allow_host: [x.com]}]}", `hostexec.commands[0] (^git push).allow_host: unknown key (did you mean allow_hosts?)`},
		"another unknown key lists the keys":  {"hostexec: {commands: [{match: '^a', env: [X]}]}", "a host command has match, ask, allow_hosts, secrets, ro, rw, ssh_agent"},
		"no match":                            {"hostexec: {commands: [{allow_hosts: [x.com]}]}", "no match"},
		"a bad regex":                         {"hostexec: {commands: [{match: 'a('}]}", "not a regular expression"},
		"a bad host":                          {"hostexec: {commands: [{match: '^a', allow_hosts: ['*']}]}", "(^a).allow_hosts"},
		"a secret without hosts":              {"hostexec: {commands: [{match: '^a', secrets: [TOKEN]}]}", "(^a).secrets"},
		"ask that is not a bool":              {"hostexec: {commands: [{match: '^a', ask: yes-please}]}", "(^a).ask: expected true or false"},
		"an entry that is not a mapping":      {"hostexec: {commands: ['^git push']}", "expected a mapping"},
		"a key set twice":                     {"hostexec: {commands: [{match: '^a', ro: [/a], ro: [/b]}]}", ""},
	}
	for name, c := range cases {
		_, err := Parse("cfg.yaml", []byte(c.text), SourceGlobal)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: Parse = %v, want one line containing %q", name, err, c.want)
		}
	}
}

//go:build linux

package main

import "testing"

func TestEachSubcommandIsBuiltUnderItsName(t *testing.T) {
	for _, sc := range subcommands {
		if got := sc.make().Name(); got != sc.name {
			t.Errorf("subcommands lists %q, its constructor builds %q", sc.name, got)
		}
	}
}

func TestAnInvocationNamingACommandBuildsThatOneAlone(t *testing.T) {
	root := newRootCmd(named([]string{"exec", "dev", "--", "make"}))
	if cs := root.Commands(); len(cs) != 1 || cs[0].Name() != "exec" {
		t.Fatalf("airlock exec built %d commands, want exec alone", len(cs))
	}
	for _, args := range [][]string{nil, {"--help"}, {"help", "exec"}, {"list"}, {"exe"}} {
		if only := named(args); only != "" {
			t.Errorf("named(%q) = %q, want the whole tree (help, aliases, suggestions)", args, only)
		}
	}
	if n := len(newRootCmd("").Commands()); n != len(subcommands) {
		t.Errorf("the whole tree has %d commands, want %d", n, len(subcommands))
	}
}

//go:build linux

package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/state"
)

func TestPortParsesTheSandboxAndAPort(t *testing.T) {
	var got *portOptions
	if err := parse(t, newPortCmd(func(o *portOptions) error { got = o; return nil }), "web", "8000/tcp"); err != nil || got == nil || got.Ref != "web" || got.Port != 8000 {
		t.Errorf("port web 8000/tcp = %v, %+v", err, got)
	}
	for _, args := range [][]string{{}, {"web", "70000"}, {"web", "http"}, {"a", "1", "2"}} {
		var ue usageError
		if err := parse(t, newPortCmd(func(*portOptions) error { return nil }), args...); !errors.As(err, &ue) {
			t.Errorf("port %q = %v, want a usage error", args, err)
		}
	}
}

func TestPortRunListsTheRecordedPorts(t *testing.T) {
	rec := state.Record{ID: "abc", Name: "web", Ports: []state.Port{{HostIP: "127.0.0.1", HostPort: 41234, SandboxPort: 3000}, {HostIP: "::1", HostPort: 8080, SandboxPort: 80}}}
	status := state.Status{State: state.Running}
	resolve := func(ref string) (state.Entry, error) {
		if ref != "web" {
			return state.Entry{}, errors.New("no such sandbox")
		}
		return state.Entry{Record: rec, Status: status}, nil
	}
	cases := []struct {
		port      int
		want, err string
	}{
		{0, "3000/tcp -> 127.0.0.1:41234\n80/tcp -> [::1]:8080\n", ""},
		{80, "[::1]:8080\n", ""},
		{9, "", "sandbox web publishes no port 9"},
	}
	for _, c := range cases {
		ios, out, _ := testIO()
		err := portRun(&portOptions{IO: ios, Ref: "web", Port: c.port, Resolve: resolve})
		if out.String() != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("port web %d = %q, %v; want %q, %q", c.port, out.String(), err, c.want, c.err)
		}
	}
	status = state.Status{State: state.Exited}
	ios, _, _ := testIO()
	if err := portRun(&portOptions{IO: ios, Ref: "web", Resolve: resolve}); err == nil || !strings.Contains(err.Error(), "its ports closed with it") {
		t.Errorf("port of an ended sandbox = %v", err)
	}
}

func TestAgentRunTakesPublishedPortsIntoItsConfig(t *testing.T) {
	var got *agentRunOptions
	ws := t.TempDir()
	if err := parse(t, newAgentRunCmd(func(o *agentRunOptions) error { got = o; return nil }), "claude", "--no-config-files", "-w", ws, "-p", "5173:5173", "-p", "3000"); err != nil {
		t.Fatal(err)
	}
	l, err := got.Config()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(l.Spec.Ports, " ") != "5173:5173 3000" {
		t.Errorf("agent run -p 5173:5173 -p 3000: ports %q", l.Spec.Ports)
	}
}

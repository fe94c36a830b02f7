package rpc

import (
	"reflect"
	"testing"

	"github.com/airlock-dev/airlock/sandbox"
)

func TestWithDefaults(t *testing.T) {
	d := &sandbox.Config{Image: "standard", Backend: "docker",
		Resources: &sandbox.Resources{MemoryMB: 512, CPUs: 1},
		Approvals: &sandbox.ApprovalsConfig{Mode: "ask"},
		Network:   &sandbox.NetworkConfig{AllowedHosts: []string{"a.example"}, DeniedHosts: []string{"bad.example"}, UpstreamCA: "/ca.pem"}}
	for name, tc := range map[string]struct {
		in, want sandbox.Config
	}{
		"an empty create takes every default": {
			sandbox.Config{},
			sandbox.Config{Image: "standard", Backend: "docker", Resources: &sandbox.Resources{MemoryMB: 512, CPUs: 1},
				Approvals: &sandbox.ApprovalsConfig{Mode: "ask"},
				Network:   &sandbox.NetworkConfig{AllowedHosts: []string{"a.example"}, DeniedHosts: []string{"bad.example"}, UpstreamCA: "/ca.pem"}},
		},
		"what create says wins; its hosts add to the session's, once each": {
			sandbox.Config{Image: "minimal", Backend: "native", Resources: &sandbox.Resources{MemoryMB: 64},
				Approvals: &sandbox.ApprovalsConfig{Mode: "deny"},
				Network:   &sandbox.NetworkConfig{AllowedHosts: []string{"b.example", "a.example"}, UpstreamCA: "/mine.pem"}},
			sandbox.Config{Image: "minimal", Backend: "native", Resources: &sandbox.Resources{MemoryMB: 64, CPUs: 1},
				Approvals: &sandbox.ApprovalsConfig{Mode: "deny"},
				Network:   &sandbox.NetworkConfig{AllowedHosts: []string{"a.example", "b.example"}, DeniedHosts: []string{"bad.example"}, UpstreamCA: "/mine.pem"}},
		},
	} {
		got := tc.in
		withDefaults(&got, d)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v %+v %+v\nwant %+v %+v %+v", name, got, got.Network, got.Resources, tc.want, tc.want.Network, tc.want.Resources)
		}
	}
	// The session's defaults are never changed by a create.
	if len(d.Network.AllowedHosts) != 1 || d.Approvals.Mode != "ask" {
		t.Errorf("a create changed the defaults: %+v %+v", d.Network, d.Approvals)
	}
}

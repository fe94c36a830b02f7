package rpc

import (
	"slices"

	"github.com/airlock-dev/airlock/sandbox"
)

// withDefaults is c with what d sets filled in under it: what create says
// wins; host lists are d's plus c's (create can add hosts, not remove
// the session's).
func withDefaults(c *sandbox.Config, d *sandbox.Config) {
	if d == nil {
		return
	}
	if c.Backend == "" {
		c.Backend = d.Backend
	}
	if c.Image == "" {
		c.Image = d.Image
	}
	if d.Resources != nil {
		if c.Resources == nil {
			c.Resources = &sandbox.Resources{}
		}
		r := c.Resources
		if r.CPUs == 0 {
			r.CPUs = d.Resources.CPUs
		}
		if r.MemoryMB == 0 {
			r.MemoryMB = d.Resources.MemoryMB
		}
		if r.TimeoutSeconds == 0 {
			r.TimeoutSeconds = d.Resources.TimeoutSeconds
		}
	}
	if d.Approvals != nil && c.Approvals == nil {
		a := *d.Approvals
		c.Approvals = &a
	}
	if dn := d.Network; dn != nil {
		if c.Network == nil {
			c.Network = &sandbox.NetworkConfig{}
		}
		n := c.Network
		n.AllowedHosts = union(dn.AllowedHosts, n.AllowedHosts)
		n.TunnelHosts = union(dn.TunnelHosts, n.TunnelHosts)
		n.DeniedHosts = union(dn.DeniedHosts, n.DeniedHosts)
		n.AddHosts = union(dn.AddHosts, n.AddHosts)
		if n.UpstreamCA == "" {
			n.UpstreamCA = dn.UpstreamCA
		}
	}
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

package policy

import (
	"strings"
	"testing"
)

func TestAllowWildcardsStopAtPublicSuffixes(t *testing.T) {
	for name, tc := range map[string]struct {
		rule  string
		allow bool // accepted as an allow rule
	}{
		"a registrable domain's wildcard is fine":       {"*.example.com", true},
		"a company's subdomain wildcard is fine":        {"*.api.github.com", true},
		"one site under a private suffix is fine":       {"*.abc.workers.dev", true},
		"a co.uk domain's wildcard is fine":             {"*.example.co.uk", true},
		"a private network's TLD is not a registry's":   {"*.internal", true},
		"with a port, a registrable domain is fine":     {"*.example.com:8443", true},
		"a TLD is refused":                              {"*.com", false},
		"an ICANN second-level suffix is refused":       {"*.co.uk", false},
		"workers.dev (private section) is refused":      {"*.workers.dev", false},
		"github.io (private section) is refused":        {"*.github.io", false},
		"s3.amazonaws.com (private section) is refused": {"*.s3.amazonaws.com", false},
		"a suffix with a port is refused too":           {"*.workers.dev:*", false},
		"a wildcard entry of the list is refused":       {"*.compute-1.amazonaws.com", false},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(Config{AllowHosts: []string{tc.rule}})
			if (err == nil) != tc.allow {
				t.Errorf("New(AllowHosts: %s) = %v, want accepted %v", tc.rule, err, tc.allow)
			}
			if err != nil && !strings.Contains(err.Error(), "public suffix") {
				t.Errorf("New(AllowHosts: %s) = %v, want the reason named", tc.rule, err)
			}
			_, err = New(Config{Tunnels: []string{tc.rule}})
			if (err == nil) != tc.allow {
				t.Errorf("New(Tunnels: %s) = %v, want accepted %v", tc.rule, err, tc.allow)
			}
			// A deny may be broad: it only narrows.
			if _, err := New(Config{DenyHosts: []string{tc.rule}}); err != nil {
				t.Errorf("New(DenyHosts: %s) = %v, want accepted", tc.rule, err)
			}
		})
	}
}

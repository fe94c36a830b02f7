package secrets

import (
	"net/netip"
	"strings"
)

// GitConfig is git configuration, as KEY, VALUE pairs in order, that makes
// git inside the sandbox use the :git secrets' placeholders: for each of
// their hosts a credential helper answering the user and the placeholder
// (after an empty helper, which drops any helper configured before for that
// URL), and for each exact host name its ssh remotes rewritten to HTTPS.
// It goes in git's environment config (GIT_CONFIG_COUNT and friends): no
// file, nothing in the repository. The helper is a shell function holding
// only the placeholder; the gateway swaps the real value in toward the
// secret's hosts and refuses the placeholder toward any other.
func (s *Set) GitConfig() [][2]string {
	var out [][2]string
	if s == nil {
		return nil
	}
	for _, c := range s.secrets {
		if c.Git == "" {
			continue
		}
		for _, h := range c.Hosts {
			host := h
			if a, err := netip.ParseAddr(h); err == nil && a.Is6() {
				host = "[" + h + "]"
			}
			base := "https://" + host
			// git runs a helper starting with ! through the shell, appending
			// the action (get, store, erase); only get is answered. User and
			// placeholder are URL-unreserved characters: nothing to quote.
			helper := "!f() { test \"$1\" = get || return 0; echo username=" + c.Git + "; echo password=" + c.Placeholder + "; }; f"
			out = append(out, [2]string{"credential." + base + ".helper", ""}, [2]string{"credential." + base + ".helper", helper})
			if strings.HasPrefix(h, "*.") || host != h || isAddr(h) {
				continue // ssh remotes are named hosts
			}
			out = append(out,
				[2]string{"url." + base + "/.insteadOf", "git@" + h + ":"},
				[2]string{"url." + base + "/.insteadOf", "ssh://git@" + h + "/"},
				[2]string{"url." + base + "/.insteadOf", "ssh://" + h + "/"},
				[2]string{"url." + base + "/.insteadOf", "git+ssh://git@" + h + "/"})
		}
	}
	return out
}

func isAddr(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

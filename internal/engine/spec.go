package engine

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/otlp"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// Complete fills in the spec's defaults, the same for every host (the CLI,
// airlock rpc, the Go API): memory is half the machine's, /tmp may hold as
// much as the memory limit, a docker sandbox runs config.DefaultImage. It
// changes only what is unset, so completing twice is completing once.
func (s *Spec) Complete() {
	c := &s.Config
	if c.Limits.MemoryBytes == 0 {
		c.Limits.MemoryBytes = backend.TotalMemory() / 2
	}
	if c.Limits.TmpBytes == 0 {
		c.Limits.TmpBytes = c.Limits.MemoryBytes
	}
	if n := c.BackendName(); c.Image == "" && (n == config.BackendDocker || n == config.BackendKubernetes) {
		c.Image = config.DefaultImage
	}
}

// SettingError is a setting the spec refuses; Where says where its value
// came from (a flag, a file and line), or is the setting's key.
type SettingError struct {
	Key, Where, Msg string
}

func (e *SettingError) Error() string { return e.Where + e.Msg }

// Validate checks the settings of the spec's config that hang together
// (backend and image, the workspace's mode and its apply options,
// approvals' decisions) and normalizes the workspace mode. where names a
// key's origin for errors; nil names the key alone.
func (s *Spec) Validate(where func(key string) string) error {
	if where == nil {
		where = func(key string) string { return key }
	}
	bad := func(key, format string, args ...any) error {
		return &SettingError{Key: key, Where: where(key), Msg: fmt.Sprintf(format, args...)}
	}
	c := &s.Config
	n := c.BackendName()
	if n != config.BackendNative && n != config.BackendDocker && n != config.BackendVM && n != config.BackendKubernetes {
		return bad("backend", " %q: use native, docker, vm or kubernetes", c.Backend)
	}
	if c.Image != "" && n != config.BackendDocker && n != config.BackendKubernetes {
		return bad("image", " needs --backend docker or kubernetes")
	}
	if n == config.BackendKubernetes {
		for _, kv := range [][]string{c.Kubernetes.NodeSelector, c.Kubernetes.Labels} {
			for _, e := range kv {
				if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
					return bad("kubernetes", ": %q: want KEY=VALUE", e)
				}
			}
		}
	}
	mode, err := workspace.ParseMode(c.Workspace.Mode)
	if err != nil {
		return &SettingError{Key: "workspace.mode", Msg: err.Error()}
	}
	if n == config.BackendKubernetes && mode == workspace.Bind {
		// A Pod cannot see this machine's directories: its workspace is
		// always a copy, uploaded and reviewed at the end.
		mode = workspace.Copy
	}
	w := c.Workspace
	if mode == workspace.Bind && w.AutoApply {
		return bad("workspace.auto_apply", " needs --workspace-mode overlay or copy: in bind mode changes land in the workspace as they happen")
	}
	if w.ApplyRisky && !w.AutoApply {
		return bad("workspace.apply_risky", " goes with --auto-apply")
	}
	if _, err := workspace.NewExcluder(w.Exclude); err != nil {
		return &SettingError{Key: "workspace.exclude", Msg: err.Error()}
	}
	if _, _, err := hidePlan(c); err != nil {
		return &SettingError{Key: "filesystem.hide", Where: where("filesystem.hide"), Msg: " " + err.Error()}
	}
	if _, err := s.Published(); err != nil {
		return bad("ports", " %v", err)
	}
	c.Workspace.Mode = string(mode)
	if p := c.Network.PolicyScript; p != "" {
		if _, err := egress.LoadPolicyScript(p, nil, ""); err != nil {
			return &SettingError{Key: "network.policy_script", Where: where("network.policy_script"), Msg: ": " + err.Error()}
		}
	}
	for key, keys := range map[string]string{"terminal.detach_keys": c.Terminal.DetachKeys, "terminal.ask_keys": c.Terminal.AskKeys} {
		if keys == "" {
			continue
		}
		if _, err := term.ParseKeys(keys); err != nil {
			return &SettingError{Key: key, Where: where(key), Msg: ": " + err.Error()}
		}
	}
	if _, _, err := otlp.Resolve(c.Audit.OTLP, os.Getenv); err != nil {
		return &SettingError{Key: "audit.otlp.endpoint", Msg: err.Error()}
	}
	if c.Approvals.Decisions != "" && !c.Approvals.Ask() {
		return bad("approvals.decisions", " goes with --ask (approvals: ask)")
	}
	return nil
}

// Published are the spec's published ports, parsed: the same entry given
// twice (a file and a flag) counts once, and two for one host address are
// refused.
func (s *Spec) Published() ([]config.Published, error) {
	var out []config.Published
	seen := map[string]bool{}
	taken := map[netip.AddrPort]string{}
	for _, e := range s.Config.Ports {
		p, err := config.ParsePublished(e)
		if err != nil {
			return nil, err
		}
		if seen[p.String()] {
			continue
		}
		seen[p.String()] = true
		if p.Host.Port() != 0 {
			if prev, ok := taken[p.Host]; ok {
				return nil, fmt.Errorf("%q and %q both publish on %s: give each its own HOST_PORT", prev, e, p.Host)
			}
			taken[p.Host] = e
		}
		out = append(out, p)
	}
	return out, nil
}

// hidePlan splits the hide patterns into patterns relative to the
// workspace (an absolute one inside it becomes anchored at its root) and
// absolute host paths or globs outside it, checking both. (The workspace
// itself or what holds it is left to backend.Hidden, which never masks
// the workspace.)
func hidePlan(c *config.Spec) (rel, abs []string, err error) {
	ws := c.Workspace.Path
	for _, p := range c.Filesystem.Hide {
		q := strings.TrimSpace(p)
		if !filepath.IsAbs(q) {
			rel = append(rel, q)
			continue
		}
		q = filepath.Clean(q)
		switch {
		case ws != "" && q != ws && backend.Within(q, ws):
			r := "/" + filepath.ToSlash(q[len(ws)+1:])
			if strings.HasSuffix(p, "/") {
				r += "/"
			}
			rel = append(rel, r)
			continue
		case strings.Contains(q, "**"):
			return nil, nil, fmt.Errorf("%q: ** works in patterns inside the workspace; outside it use *, ? and [...]", p)
		}
		if _, err := filepath.Match(q, ""); err != nil {
			return nil, nil, fmt.Errorf("%q: bad glob (use *, ? and [...])", p)
		}
		abs = append(abs, q)
	}
	if _, err := workspace.NewHider(rel); err != nil {
		return nil, nil, err
	}
	return rel, abs, nil
}

package engine

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/egress"
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
	if c.Image == "" && c.BackendName() == config.BackendDocker {
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
	if n := c.BackendName(); n != config.BackendNative && n != config.BackendDocker && n != config.BackendVM {
		return bad("backend", " %q: use native, docker or vm", c.Backend)
	}
	if c.Image != "" && c.BackendName() != config.BackendDocker {
		return bad("image", " needs --backend docker")
	}
	mode, err := workspace.ParseMode(c.Workspace.Mode)
	if err != nil {
		return &SettingError{Key: "workspace.mode", Msg: err.Error()}
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
	c.Workspace.Mode = string(mode)
	if p := c.Network.PolicyScript; p != "" {
		if _, err := egress.LoadPolicyScript(p, nil, ""); err != nil {
			return &SettingError{Key: "network.policy_script", Where: where("network.policy_script"), Msg: ": " + err.Error()}
		}
	}
	if c.Approvals.Decisions != "" && !c.Approvals.Ask() {
		return bad("approvals.decisions", " goes with --ask (approvals: ask)")
	}
	return nil
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

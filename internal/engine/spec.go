package engine

import (
	"fmt"
	"strings"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
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
	c.Workspace.Mode = string(mode)
	if c.Approvals.Decisions != "" && !c.Approvals.Ask() {
		return bad("approvals.decisions", " goes with --ask (approvals: ask)")
	}
	return nil
}

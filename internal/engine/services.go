package engine

import (
	"context"
	"net/http"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/hostexec"
)

// BinInside is where the airlock binary appears inside a sandbox that has
// broker services, also under the names it answers to (hostexec,
// mcp-bridge), read-only; it is put first on PATH.
const BinInside = "/run/airlock/bin"

// toolsInside shows exe (the airlock binary) inside and returns the
// environment that finds it.
func toolsInside(exe string, b *backend.Spec, env []string) []string {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return env
		}
	}
	for _, name := range []string{"airlock", "hostexec", "mcp-bridge"} {
		b.Files = append(b.Files, backend.FileMount{Source: exe, Target: filepath.Join(BinInside, name)})
	}
	path, ok := config.LookupEnv(env, "PATH")
	if !ok {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return config.MergeEnv(env, []string{"PATH=" + BinInside + ":" + path})
}

// services are the sandbox's own handlers on airlock.internal.
func (s *Sandbox) services(wsMode string) (map[string]http.Handler, error) {
	out := map[string]http.Handler{}
	// Whatever holds airlock's own state is never a command's or a tool's
	// to touch.
	protected := []string{s.bspec.StateRoot}
	if dir, err := config.Dir(); err == nil {
		protected = append(protected, dir)
	}
	if h := s.spec.Config.HostExec; h.Enabled() {
		var ask func(context.Context, approval.Request) approval.Decision
		if s.ask.Asking() {
			ask = s.ask.Ask
		}
		rules := make([]hostexec.Rule, 0, len(h.Commands))
		for _, c := range h.Commands {
			rules = append(rules, hostexec.Rule{Match: c.Match, Ask: c.Ask, AllowHosts: c.AllowHosts, Secrets: c.Secrets,
				RO: c.RO, RW: c.RW, SSHAgent: c.SSHAgent})
		}
		own := protected
		if dir, err := config.DataDir(); err == nil {
			own = append(own[:len(own):len(own)], dir)
		}
		handler, err := hostexec.New(hostexec.Config{Rules: rules, AutoApprove: h.AutoApprove, Ask: h.Ask, AutoDeny: h.AutoDeny,
			Timeout: h.Timeout, AllowCopyMode: h.AllowCopyMode},
			hostexec.Env{Sandbox: s.h.ID(), Dir: s.spec.Config.Workspace.Path, WorkspaceMode: wsMode, Ask: ask, Audit: s.record,
				Exe: s.guestExe, Protected: own})
		if err != nil {
			return nil, err
		}
		out[hostexec.Pattern] = handler
	}
	if raw := s.spec.Config.MCPServers; raw != nil {
		var ask func(context.Context, approval.Request) approval.Decision
		if s.ask.Asking() {
			ask = s.ask.Ask
		}
		var err error
		if s.mcp, err = startMCP(s, raw, ask, protected); err != nil {
			return nil, err
		}
		out["/mcp/"] = s.mcp.Handler()
	}
	return out, nil
}

// mcpServers are a sandbox's MCP servers behind their policy (mcpproxy's,
// in the full build): what /mcp/ on airlock.internal serves.
type mcpServers interface {
	Handler() http.Handler
	Close() error
}

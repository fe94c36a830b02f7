package engine

// The MCP proxy, whose library (the MCP SDK) every airlock binary links:
// its package initialisers run at every start, so they must stay cheap (see
// bench/inits.sh). The backends' are in backends_linux.go.

import (
	"context"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/mcpproxy"
)

// startMCP starts s's MCP servers (raw: config.Spec.MCPServers) behind
// their policy.
func startMCP(s *Sandbox, raw any, ask func(context.Context, approval.Request) approval.Decision, protected []string) (mcpServers, error) {
	servers, err := mcpproxy.ParseServers(raw)
	if err != nil {
		return nil, err
	}
	p, err := mcpproxy.New(servers, mcpproxy.Env{Sandbox: s.h.ID(), LogDir: s.h.Dir(), Protected: protected,
		Ask: ask, Audit: s.record, Exe: s.guestExe})
	if err != nil {
		return nil, err
	}
	return p, nil
}

//go:build airlock_front

package engine

import (
	"context"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/backend"
)

// The lean front's engine (see full.go): native sandboxes alone, no MCP
// proxy. BuiltIn tells a caller to run the full binary for the rest.

var fullBackends map[string]func(exe string) (backend.Backend, error)

const mcpBuiltIn = false

func startMCP(*Sandbox, any, func(context.Context, approval.Request) approval.Decision, []string) (mcpServers, error) {
	return nil, &NotBuiltIn{What: "MCP proxy"}
}

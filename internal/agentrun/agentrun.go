// Package agentrun prepares an agent's run on the host: it finds the agent's
// CLI, its keys or login, its private home and the files and inputs its
// profile (internal/agents) asks for, and hands back what the engine's spec
// needs. It knows no command line.
package agentrun

import "time"

// ToolSlack is how much longer than an approval an agent's MCP client
// waits for a tool call, so a person's yes arrives before the client gives up.
const ToolSlack = 5 * time.Minute

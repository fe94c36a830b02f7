package agentrun

import (
	"os"
	"slices"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/mcpproxy"
)

// Env is the agent's environment over the user's --env entries: the
// profile's fixed variables, its CA variables, and what Launch added.
func Env(p *agents.Profile, userEnv []string, l agents.Launch, root bool) []string {
	// Node's own fetch ignores HTTPS_PROXY unless told (Node ≥ 22.21):
	// through the proxy door (docker, unprivileged users) agents need it.
	env := append(slices.Clone(userEnv), "NODE_USE_ENV_PROXY=1")
	env = append(env, p.Env...)
	if root {
		env = append(env, p.RootEnv...)
	}
	for _, v := range p.CAEnv {
		env = append(env, v+"="+egress.BundleInside)
	}
	return append(env, l.Env...)
}

// Inputs gathers what the profile's Launch depends on.
func Inputs(p *agents.Profile, sc config.Spec, keys map[string]string, servers []mcpproxy.ServerConfig, root bool, args []string, resume string) agents.Inputs {
	hostHome, _ := os.UserHomeDir()
	askTimeout := sc.Approvals.Timeout
	if askTimeout <= 0 {
		askTimeout = approval.DefaultTimeout
	}
	in := agents.Inputs{
		Home:        backend.SandboxHome(hostHome),
		Workspace:   sc.Workspace.Path,
		Root:        root,
		CABundle:    egress.BundleInside,
		Keys:        keys,
		ToolTimeout: askTimeout + ToolSlack,
		Args:        args,
		Resume:      resume,
	}
	facts := agents.Facts{
		Workspace:  sc.Workspace.Path,
		AllowHosts: sc.Network.AllowHosts,
		Ask:        sc.Approvals.Ask(),
		AskTimeout: askTimeout,
		HostExec:   sc.HostExec.Enabled(),
	}
	for _, s := range servers {
		in.MCP = append(in.MCP, agents.MCPServer{
			Name:    s.Name,
			Command: engine.BinInside + "/mcp-bridge",
			Args:    []string{s.Name},
			URL:     "http://airlock.internal/mcp/" + s.Name,
		})
		if s.Timeout+ToolSlack > in.ToolTimeout {
			in.ToolTimeout = s.Timeout + ToolSlack
		}
		facts.MCP = append(facts.MCP, s.Name)
	}
	in.Orientation = agents.Orientation(facts)
	return in
}

// AppendNew appends the values not in list yet.
func AppendNew(list []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}

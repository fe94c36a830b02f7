package agentrun

import (
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/images"
	"github.com/airlock-dev/airlock/internal/mcpproxy"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// Request is what an agent's run starts from.
type Request struct {
	Profile *agents.Profile
	// Spec is the run's config; Prepare adds the profile to it: its hosts
	// and endpoints, its image (docker), the agent's home and the
	// directories its CLI needs read-only.
	Spec   *config.Spec
	Args   []string // the agent's own arguments
	Resume string   // a session to go on with: "last", an id or a prefix; "" for none
	Stderr io.Writer
	Quiet  bool
}

// Prepared is what the engine's spec needs from the agent's profile.
type Prepared struct {
	Argv    []string          // the agent's command line, its CLI's path first
	Env     []string          // the sandbox's environment over the user's --env
	Secrets []*secrets.Secret // its keys, or its login's token, held on the host
	Home    string            // the agent's home on the host
	Project string            // the workspace's project, for its session record
	// Stop stops keeping a login fresh once the run is over.
	Stop func()
}

// ServersError is a config's MCP servers that do not parse: the user's
// input, as a flag error is.
type ServersError struct{ Err error }

func (e ServersError) Error() string { return e.Err.Error() }
func (e ServersError) Unwrap() error { return e.Err }

// Prepare finds the agent's CLI, its keys or login, its session to resume
// and its home, writes the files its profile asks for into that home, and
// returns its command line and environment. On error nothing is left
// running.
func Prepare(r Request) (_ *Prepared, err error) {
	p, sc := r.Profile, r.Spec
	docker := sc.BackendName() == config.BackendDocker
	if docker && sc.Image == "" {
		sc.Image = images.Tag("agents") // airlock images build --variant agents
	}
	cli, err := Find(p, docker)
	if err != nil {
		return nil, err
	}
	project := projectOf(sc.Workspace.Path)
	var resume string
	if r.Resume != "" {
		s, err := FindSession(p.Name, project, r.Resume)
		if err != nil {
			return nil, err
		}
		resume = s.ID
	}

	// The profile adds to the config: hosts, keys, home, the CLI's files.
	sc.Network.AllowHosts = AppendNew(sc.Network.AllowHosts, p.Hosts...)
	sc.Network.Endpoints = AppendNew(sc.Network.Endpoints, p.Endpoints...)
	hostHome := sc.Home
	if hostHome == "" {
		if hostHome, err = Home(p.Name, project); err != nil {
			return nil, err
		}
		sc.Home = hostHome
	}
	secs, keys, stop, err := Credentials(p, sc.Network.Secrets, hostHome, r.Stderr, r.Quiet)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	sc.RO = AppendNew(sc.RO, cli.Expose...)
	servers, err := mcpproxy.ParseServers(sc.MCPServers)
	if err != nil {
		return nil, ServersError{err}
	}
	// Who the agent is inside: the caller (a native sandbox of root is uid
	// 0, mapped) or, in a container, the workspace's owner.
	uid, gid := engine.CommandUser(sc.BackendName(), sc.Workspace.Path)
	root := uid == 0
	in := Inputs(p, *sc, keys, servers, root, r.Args, resume)
	l, err := p.Launch(in)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", p.Name, err)
	}
	if err := WriteHomeFiles(hostHome, l.Files); err != nil {
		return nil, fmt.Errorf("agent %s: its home %s: %w", p.Name, hostHome, err)
	}
	if uid != os.Geteuid() && os.Geteuid() == 0 {
		// The container runs as the workspace's owner: the home is theirs.
		if err := ChownTree(hostHome, uid, gid); err != nil {
			return nil, fmt.Errorf("agent %s: its home %s: %w", p.Name, hostHome, err)
		}
	}
	env := Env(p, sc.Env, l, root)

	argv := slices.Clone(l.Argv)
	if len(argv) == 0 {
		return nil, fmt.Errorf("agent %s: its profile made no command", p.Name)
	}
	argv[0] = cli.Path
	return &Prepared{Argv: argv, Env: env, Secrets: secs, Home: hostHome, Project: project, Stop: stop}, nil
}

// projectOf is the project a workspace belongs to (as config sees it).
func projectOf(ws string) string {
	dir, _ := config.Dir()
	return config.ProjectOf(dir, ws)
}

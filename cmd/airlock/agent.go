package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/credentials"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/images"
	"github.com/airlock-dev/airlock/internal/mcpproxy"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/workspace"
)

// agentToolSlack is how much longer than an approval an agent's MCP client
// waits for a tool call, so a person's yes arrives before the client gives up.
const agentToolSlack = 5 * time.Minute

func newAgentCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "agent",
		Short: "Run a coding agent (Claude Code, Codex, Gemini CLI, OpenCode, Goose) in a sandbox",
		Long: `Run a coding agent in a sandbox with its API key held back on the host.

airlock knows each agent's provider hosts, the variables its keys are read
from, the flags that make it work unattended, and where its settings and MCP
servers go. The agent gets a private home kept per project (under airlock's
data dir; never your real home) with its first-run questions answered; its
key becomes a placeholder that the gateway swaps for the real value only on
the way to its provider; every other host is refused (or, with --ask, waits
for you). Nothing is written into your repository.

  airlock agent ls                         known agents, installed or not
  airlock agent install claude             npm install the pinned version
  airlock agent run claude                 an interactive session here
  airlock agent run claude -- -p "fix the failing test"
  airlock agent sessions                   sessions that can be resumed
  airlock agent run claude --resume last   go on where the last one stopped`,
	}
	c.AddCommand(newAgentRunCmd(), newAgentLsCmd(), newAgentInstallCmd(), newAgentSessionsCmd())
	return c
}

type agentOptions struct {
	resume string
}

func newAgentRunCmd() *cobra.Command {
	o := &runOptions{}
	ao := &agentOptions{}
	c := &cobra.Command{
		Use:   "run NAME [run flags] [-- AGENT ARGS...]",
		Short: "Run an agent in a sandbox with its profile applied",
		Long: `Run the agent NAME (see airlock agent ls) in a new sandbox with its
profile applied: its provider's hosts allowed, its keys held back (each key
variable set on the host becomes a placeholder inside that works only toward
the provider), its CA and telemetry settings, its unattended flags (the
sandbox is the boundary, so the agent's own permission prompts and sandbox
are off), orientation text about what the sandbox allows, and the MCP
servers of your config wired in through airlock's policing proxy.

Every flag of airlock run works here too and adds to the profile (--ask,
--allow-host, --workspace-mode overlay, --memory, --secret, ...). Arguments
after -- go to the agent. The agent's home is private and kept per project
and agent under airlock's data dir (--home DIR to choose another).

After the run, the agent's own session id is recorded: airlock agent
sessions lists them, --resume ID (or --resume last) goes on with one. The
sandbox is kept, so airlock audit ID shows what the agent reached and
airlock get ID what it spent (--keep=false to drop it; airlock rm ID).`,
		Example: `  ANTHROPIC_API_KEY=... airlock agent run claude -- -p "add a test for parse()"
  OPENAI_API_KEY=... airlock agent run codex -- exec "fix the build"
  airlock agent run gemini --workspace-mode overlay     # review before apply
  airlock agent run claude --ask                        # unknown hosts wait for you
  airlock agent run claude --resume last -- -p "now the docs"`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{"which agent? known agents: " + strings.Join(agents.Names(), ", ")}
			}
			if d := c.ArgsLenAtDash(); len(args) > 1 && d != 1 {
				return usageError{fmt.Sprintf("unexpected argument %q: the agent's own arguments go after --, as in airlock agent run %s -- -p \"PROMPT\"", args[1], args[0])}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error { return agentRun(c, o, ao, args[0], args[1:]) },
	}
	addRunFlags(c.Flags(), o)
	c.Flags().StringVar(&ao.resume, "resume", "", "go on with the agent's session `ID` (from airlock agent sessions), or last")
	return c
}

func agentRun(c *cobra.Command, o *runOptions, ao *agentOptions, name string, args []string) error {
	p, err := agents.Lookup(name)
	if err != nil {
		return usageError{err.Error()}
	}
	if o.detach {
		return usageError{"airlock agent run does not detach yet (its keys are handed over in memory): run it in the foreground, e.g. in tmux"}
	}
	cfg, err := runConfig(c, o)
	if err != nil {
		return err
	}
	sc := &cfg.Spec
	docker := sc.BackendName() == config.BackendDocker
	if docker && sc.Image == "" {
		sc.Image = images.Tag("agents") // airlock images build --variant agents
	}
	cli, err := findAgent(p, docker)
	if err != nil {
		return err
	}
	project := projectOf(sc.Workspace.Path)
	var resume string
	if ao.resume != "" {
		s, err := findSession(p.Name, project, ao.resume)
		if err != nil {
			return err
		}
		resume = s.ID
	}

	// The profile adds to the config: hosts, keys, home, the CLI's files.
	sc.Network.AllowHosts = appendNew(sc.Network.AllowHosts, p.Hosts...)
	sc.Network.Endpoints = appendNew(sc.Network.Endpoints, p.Endpoints...)
	hostHome := sc.Home
	if hostHome == "" {
		if hostHome, err = agentHome(p.Name, project); err != nil {
			return err
		}
		sc.Home = hostHome
	}
	secs, keys, stop, err := agentCredentials(p, sc.Network.Secrets, hostHome, o.quiet)
	if err != nil {
		return err
	}
	defer stop()
	sc.RO = appendNew(sc.RO, cli.expose...)
	servers, err := mcpproxy.ParseServers(sc.MCPServers)
	if err != nil {
		return usageError{err.Error()}
	}
	// Who the agent is inside: the caller (a native sandbox of root is uid
	// 0, mapped) or, in a container, the workspace's owner.
	uid, gid := engine.CommandUser(sc.BackendName(), sc.Workspace.Path)
	root := uid == 0
	in := agentInputs(p, cfg, keys, servers, root, args, resume)
	l, err := p.Launch(in)
	if err != nil {
		return fmt.Errorf("agent %s: %w", p.Name, err)
	}
	if err := writeHomeFiles(hostHome, l.Files); err != nil {
		return fmt.Errorf("agent %s: its home %s: %w", p.Name, hostHome, err)
	}
	if uid != os.Geteuid() && os.Geteuid() == 0 {
		// The container runs as the workspace's owner: the home is theirs.
		if err := chownTree(hostHome, uid, gid); err != nil {
			return fmt.Errorf("agent %s: its home %s: %w", p.Name, hostHome, err)
		}
	}
	env := agentEnv(p, sc.Env, l, root)

	argv := slices.Clone(l.Argv)
	if len(argv) == 0 {
		return fmt.Errorf("agent %s: its profile made no command", p.Name)
	}
	argv[0] = cli.path
	if !c.Flags().Changed("keep") {
		// An agent's session is worth its audit: what it reached, what it
		// spent (airlock audit ID, airlock get ID). --keep=false drops it.
		o.keep = true
	}
	if !c.Flags().Changed("tty") {
		// An agent is interactive unless told otherwise: give it the terminal.
		o.tty = term.IsTerminal(os.Stdin) && term.IsTerminal(os.Stdout)
	}
	spec, err := runSpec(cfg, o, argv)
	if err != nil {
		return err
	}
	if !o.quiet {
		var present []string
		for _, f := range p.RepoSettings {
			if _, err := os.Lstat(filepath.Join(sc.Workspace.Path, f)); err == nil {
				present = append(present, f)
			}
		}
		if len(present) > 0 {
			fmt.Fprintf(os.Stderr, "airlock: note: the repository's own %s settings apply inside (%s); they cannot widen what the sandbox allows\n", p.Display, strings.Join(present, ", "))
		}
	}
	started := time.Now()
	code, err := launch(spec, o, env, secs)
	if err != nil {
		return err
	}
	recordSession(p, project, sc.Workspace.Path, hostHome, started, code, o.quiet)
	return exitError{code}
}

// agentCredentials finds the agent's keys on the host; with none, its OAuth
// login stands in, kept fresh on the host until stop is called.
func agentCredentials(p *agents.Profile, userSecrets []secrets.Spec, agentHome string, quiet bool) (secs []*secrets.Secret, keys map[string]string, stop func(), err error) {
	secs, keys, err = agentKeys(p, userSecrets)
	var noKey errNoKey
	if !errors.As(err, &noKey) {
		return secs, keys, func() {}, err
	}
	login, lerr := agentLogin(p, agentHome)
	if lerr != nil {
		return nil, nil, nil, lerr
	}
	if login == nil {
		return nil, nil, nil, err
	}
	login.Warn = func(err error) {
		if !quiet {
			fmt.Fprintf(os.Stderr, "airlock: warning: %v\n", err)
		}
	}
	go func() {
		if err := login.Run(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
		}
	}()
	return []*secrets.Secret{login.Secret()}, keys, func() { login.Close() }, nil
}

// agentEnv is the agent's environment over the user's --env entries: the
// profile's fixed variables, its CA variables, and what Launch added.
func agentEnv(p *agents.Profile, userEnv []string, l agents.Launch, root bool) []string {
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

// agentInputs gathers what the profile's Launch depends on.
func agentInputs(p *agents.Profile, cfg *config.Loaded, keys map[string]string, servers []mcpproxy.ServerConfig, root bool, args []string, resume string) agents.Inputs {
	sc := cfg.Spec
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
		ToolTimeout: askTimeout + agentToolSlack,
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
		if s.Timeout+agentToolSlack > in.ToolTimeout {
			in.ToolTimeout = s.Timeout + agentToolSlack
		}
		facts.MCP = append(facts.MCP, s.Name)
	}
	in.Orientation = agents.Orientation(facts)
	return in
}

// agentKeys turns each of the profile's keys set on the host into a secret
// (the sandbox sees its placeholder) and returns them with Env → placeholder.
// A key the user gave with --secret is theirs. With no key at all, the error
// says which variables and files were looked for.
func agentKeys(p *agents.Profile, userSecrets []secrets.Spec) ([]*secrets.Secret, map[string]string, error) {
	given := map[string]bool{}
	for _, sp := range userSecrets {
		given[sp.Name] = true
	}
	var secs []*secrets.Secret
	keys := map[string]string{}
	var looked []string
	for _, k := range p.Keys {
		if given[k.Env] {
			keys[k.Env] = ""
			continue
		}
		for _, src := range k.Sources() {
			looked = appendNew(looked, src)
			if v, ok := os.LookupEnv(src); !ok || v == "" {
				continue
			}
			sp, err := secrets.EnvSpec(k.Env, src, k.Hosts, k.Prefix)
			if err != nil {
				return nil, nil, fmt.Errorf("agent %s: %w", p.Name, err)
			}
			s, err := sp.Open(secrets.DefaultSources())
			if err != nil {
				return nil, nil, fmt.Errorf("agent %s: %w", p.Name, err)
			}
			secs = append(secs, s)
			keys[k.Env] = s.Placeholder
			break
		}
	}
	if len(keys) == 0 && len(p.Keys) > 0 {
		msg := fmt.Sprintf("%s needs an API key and none was found: set %s on the host", p.Display, strings.Join(looked, " or "))
		for _, l := range p.Logins {
			msg += fmt.Sprintf(", or log in with %s so ~/%s exists", p.Binary, l.Path)
		}
		return nil, nil, errNoKey{msg + " (it stays on the host; the sandbox sees a placeholder), or pass --secret NAME@HOST"}
	}
	return secs, keys, nil
}

// errNoKey: none of an agent's keys is set (a login may stand in).
type errNoKey struct{ msg string }

func (e errNoKey) Error() string { return e.msg }

// agentLogin opens the agent's first OAuth login found in the user's real
// home: the sandbox's copy (a placeholder token, no refresh token) goes to
// the agent's home, the real token to the gateway; Run keeps it fresh.
func agentLogin(p *agents.Profile, agentHome string) (*credentials.Login, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, nil
	}
	for _, l := range p.Logins {
		if len(credentials.Find(home, l.Path)) == 0 {
			continue
		}
		login, err := credentials.Open(context.Background(), home, l.Path, l.Hosts)
		if err != nil {
			return nil, fmt.Errorf("%s login ~/%s: %w", p.Display, l.Path, err)
		}
		if err := workspace.WriteFileBeneath(agentHome, l.Path, login.SandboxFile()); err != nil {
			login.Close()
			return nil, fmt.Errorf("%s login: the agent's home: %w", p.Display, err)
		}
		return login, nil
	}
	return nil, nil
}

// agentCLI is where an agent's command was found.
type agentCLI struct {
	path    string   // the command to run (the same path inside)
	expose  []string // host dirs to show read-only so it runs (none if visible anyway)
	version string   // "" if unknown
	where   string   // "airlock", "PATH" or "image"
}

// findAgent finds the agent's CLI: airlock's own install first (its pinned
// version), then the host's PATH. In a docker sandbox it is the image's.
func findAgent(p *agents.Profile, docker bool) (agentCLI, error) {
	if docker {
		// The image's own PATH is not the sandbox's: name the command whole.
		return agentCLI{path: images.AgentsBin + "/" + p.Binary, where: "image"}, nil
	}
	if dir, err := agentInstallDir(p.Name); err == nil {
		bin := filepath.Join(dir, "node_modules", ".bin", p.Binary)
		if _, err := os.Stat(bin); err == nil {
			return agentCLI{path: bin, expose: []string{dir}, version: packageVersion(bin, p.Package), where: "airlock"}, nil
		}
	}
	bin, err := exec.LookPath(p.Binary)
	if err != nil {
		if p.Package == "" {
			return agentCLI{}, fmt.Errorf("%s (%s) is not installed and airlock cannot install it: %s", p.Display, p.Binary, p.Install)
		}
		return agentCLI{}, fmt.Errorf("%s (%s) is not installed: airlock agent install %s (npm %s@%s), or put %s on PATH", p.Display, p.Binary, p.Name, p.Package, p.Version, p.Binary)
	}
	bin, _ = filepath.Abs(bin)
	cli := agentCLI{path: bin, version: packageVersion(bin, p.Package), where: "PATH"}
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return cli, nil
	}
	// An npm install keeps the command's code (and, for Codex, a native
	// binary in a sibling package) in a node_modules tree: show all of it,
	// and the link's own dir when the link is outside the tree (a global
	// bin dir, a linked node_modules). Elsewhere, what the sandbox cannot
	// see (a home, /tmp) is shown.
	if nm := nodeModulesRoot(real); nm != "" {
		cli.expose = []string{nm}
		if !under(bin, nm) {
			cli.expose = append(cli.expose, filepath.Dir(bin))
		}
	} else if home, _ := os.UserHomeDir(); under(real, home) || under(real, os.TempDir()) {
		cli.expose = []string{filepath.Dir(real)}
	}
	return cli, nil
}

// nodeModulesRoot is the dir holding the outermost node_modules above p, "" if none.
func nodeModulesRoot(p string) string {
	i := strings.Index(p, "/node_modules/")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// under reports whether p is dir or inside it.
func under(p, dir string) bool {
	return dir != "" && dir != "/" && (p == dir || strings.HasPrefix(p, dir+"/"))
}

// packageVersion reads the version of npm package pkg from the
// package.json above bin's real path; "" if not found.
func packageVersion(bin, pkg string) string {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil || pkg == "" {
		return ""
	}
	for d := filepath.Dir(real); d != filepath.Dir(d); d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "package.json"))
		if err != nil {
			continue
		}
		var m struct{ Name, Version string }
		if json.Unmarshal(b, &m) == nil && m.Name == pkg {
			return m.Version
		}
	}
	return ""
}

// agentsDir is airlock's data dir for agents: installs, homes, sessions.
func agentsDir() (string, error) {
	d, err := config.DataDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "agents"), nil
}

func agentInstallDir(name string) (string, error) {
	d, err := agentsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "install", name), nil
}

// agentHome is the agent's private home for a project, made if missing:
// kept across runs (logins, history, sessions), never the user's own.
func agentHome(name, project string) (string, error) {
	d, err := agentsDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(project))
	h := filepath.Join(d, "homes", filepath.Base(project)+"-"+hex.EncodeToString(sum[:6]), name)
	if err := os.MkdirAll(h, 0o700); err != nil {
		return "", fmt.Errorf("agent home: %w", err)
	}
	return h, nil
}

// writeHomeFiles writes the profile's files into the agent's home. The
// home is the sandbox's to write: a link it planted (say .claude →
// ~/.ssh) must not lead these writes out, so every directory is opened
// beneath the home without following links, and each file is replaced by
// a rename, never written through.
func writeHomeFiles(home string, files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := workspace.WriteFileBeneath(home, n, files[n]); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	return nil
}

// chownTree gives dir and everything in it to uid:gid, links themselves
// (never their targets). The home may hold what an earlier sandbox left,
// and another run's sandbox may be changing it now: each directory is
// opened from its parent's descriptor without following a link, so a
// directory swapped for a link cannot lead the walk (as root) outside.
func chownTree(dir string, uid, gid int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		unix.Close(fd)
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return chownBeneath(fd, dir, uid, gid, 0)
}

// chownBeneath chowns the entries of the directory fd (closing it), and
// recurses into its subdirectories, at most 64 deep.
func chownBeneath(fd int, name string, uid, gid, depth int) error {
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	if depth > 64 {
		return fmt.Errorf("chown %s: nested more than 64 directories deep", name)
	}
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			p := filepath.Join(name, n)
			if err := unix.Fchownat(fd, n, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return fmt.Errorf("chown %s: %w", p, err)
			}
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				continue
			}
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // replaced meanwhile (by a link, say): not followed
			}
			if err := chownBeneath(sub, p, uid, gid, depth+1); err != nil {
				return err
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("chown %s: %w", name, err)
		}
	}
}

// appendNew appends the values not in list yet.
func appendNew(list []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	return list
}

func newAgentLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the known agents, whether installed, their version and where found",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tAGENT\tVERSION\tPINNED\tFOUND")
			for _, p := range agents.All() {
				version, where := "-", "not installed: "
				if cli, err := findAgent(p, false); err == nil {
					version, where = cli.version, cli.where+" "+cli.path
					if version == "" {
						version = "?"
					}
				} else if p.Package != "" {
					where += "airlock agent install " + p.Name
				} else {
					where += "see airlock agent install " + p.Name
				}
				pinned := p.Version
				if pinned == "" {
					pinned = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", p.Name, p.Display, version, pinned, where)
			}
			return w.Flush()
		},
	}
}

func newAgentInstallCmd() *cobra.Command {
	var version string
	c := &cobra.Command{
		Use:   "install NAME",
		Short: "Install an agent's CLI with npm into airlock's data dir",
		Long: `Install the agent's CLI from npm into airlock's data dir, at the version
airlock's profile was made for (--version to choose another). airlock agent
run prefers this copy over one on your PATH. Needs npm on the host.`,
		Args: oneArg("an agent name"),
		RunE: func(c *cobra.Command, args []string) error {
			p, err := agents.Lookup(args[0])
			if err != nil {
				return usageError{err.Error()}
			}
			if p.Package == "" {
				return fmt.Errorf("%s is not on npm: %s", p.Display, p.Install)
			}
			if version == "" {
				version = p.Version
			}
			npm, err := exec.LookPath("npm")
			if err != nil {
				return errors.New("npm is not on PATH: install Node.js and npm (e.g. apt install npm), then try again")
			}
			dir, err := agentInstallDir(p.Name)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			pkg := p.Package + "@" + version
			fmt.Fprintf(os.Stderr, "airlock: installing %s into %s (npm; this downloads from the npm registry)...\n", pkg, dir)
			cmd := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--save-exact", pkg)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("npm install %s: %v (npm's output is above)", pkg, err)
			}
			bin := filepath.Join(dir, "node_modules", ".bin", p.Binary)
			if _, err := os.Stat(bin); err != nil {
				return fmt.Errorf("npm installed %s but %s is missing", pkg, bin)
			}
			fmt.Fprintf(os.Stderr, "airlock: %s %s installed: airlock agent run %s\n", p.Display, packageVersion(bin, p.Package), p.Name)
			return nil
		},
	}
	c.Flags().StringVar(&version, "version", "", "the npm version to install (default: the version airlock's profile is pinned to)")
	return c
}

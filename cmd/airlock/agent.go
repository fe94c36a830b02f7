package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/agentrun"
	"github.com/airlock-dev/airlock/internal/agents"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/images"
	"github.com/airlock-dev/airlock/internal/mcpproxy"
	"github.com/airlock-dev/airlock/internal/term"
)

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
	c.AddCommand(newAgentRunCmd(), newAgentLsCmd(nil), newAgentInstallCmd(nil), newAgentSessionsCmd(nil))
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
	cli, err := agentrun.Find(p, docker)
	if err != nil {
		return err
	}
	project := projectOf(sc.Workspace.Path)
	var resume string
	if ao.resume != "" {
		s, err := agentrun.FindSession(p.Name, project, ao.resume)
		if err != nil {
			return err
		}
		resume = s.ID
	}

	// The profile adds to the config: hosts, keys, home, the CLI's files.
	sc.Network.AllowHosts = agentrun.AppendNew(sc.Network.AllowHosts, p.Hosts...)
	sc.Network.Endpoints = agentrun.AppendNew(sc.Network.Endpoints, p.Endpoints...)
	hostHome := sc.Home
	if hostHome == "" {
		if hostHome, err = agentrun.Home(p.Name, project); err != nil {
			return err
		}
		sc.Home = hostHome
	}
	secs, keys, stop, err := agentrun.Credentials(p, sc.Network.Secrets, hostHome, os.Stderr, o.quiet)
	if err != nil {
		return err
	}
	defer stop()
	sc.RO = agentrun.AppendNew(sc.RO, cli.Expose...)
	servers, err := mcpproxy.ParseServers(sc.MCPServers)
	if err != nil {
		return usageError{err.Error()}
	}
	// Who the agent is inside: the caller (a native sandbox of root is uid
	// 0, mapped) or, in a container, the workspace's owner.
	uid, gid := engine.CommandUser(sc.BackendName(), sc.Workspace.Path)
	root := uid == 0
	in := agentrun.Inputs(p, cfg.Spec, keys, servers, root, args, resume)
	l, err := p.Launch(in)
	if err != nil {
		return fmt.Errorf("agent %s: %w", p.Name, err)
	}
	if err := agentrun.WriteHomeFiles(hostHome, l.Files); err != nil {
		return fmt.Errorf("agent %s: its home %s: %w", p.Name, hostHome, err)
	}
	if uid != os.Geteuid() && os.Geteuid() == 0 {
		// The container runs as the workspace's owner: the home is theirs.
		if err := agentrun.ChownTree(hostHome, uid, gid); err != nil {
			return fmt.Errorf("agent %s: its home %s: %w", p.Name, hostHome, err)
		}
	}
	env := agentrun.Env(p, sc.Env, l, root)

	argv := slices.Clone(l.Argv)
	if len(argv) == 0 {
		return fmt.Errorf("agent %s: its profile made no command", p.Name)
	}
	argv[0] = cli.Path
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
	agentrun.RecordSession(p, project, sc.Workspace.Path, hostHome, started, code, os.Stderr, o.quiet)
	return exitError{code}
}

// agentLsOptions is what airlock agent ls needs.
type agentLsOptions struct {
	IO *ioStreams
	// Find finds an agent's CLI on this host (agentrun.Find, native).
	Find func(*agents.Profile) (agentrun.CLI, error)
}

func newAgentLsCmd(runF func(*agentLsOptions) error) *cobra.Command {
	o := &agentLsOptions{IO: systemIO(), Find: func(p *agents.Profile) (agentrun.CLI, error) { return agentrun.Find(p, false) }}
	return &cobra.Command{
		Use:   "ls",
		Short: "List the known agents, whether installed, their version and where found",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(o)
			}
			return agentLsRun(o)
		},
	}
}

func agentLsRun(o *agentLsOptions) error {
	w := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tAGENT\tVERSION\tPINNED\tFOUND")
	for _, p := range agents.All() {
		version, where := "-", "not installed: "
		if cli, err := o.Find(p); err == nil {
			version, where = cli.Version, cli.Where+" "+cli.Path
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
}

// agentInstallOptions is what airlock agent install needs.
type agentInstallOptions struct {
	IO      *ioStreams
	Name    string
	Version string // "" for the profile's pinned one
}

func newAgentInstallCmd(runF func(*agentInstallOptions) error) *cobra.Command {
	o := &agentInstallOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "install NAME",
		Short: "Install an agent's CLI with npm into airlock's data dir",
		Long: `Install the agent's CLI from npm into airlock's data dir, at the version
airlock's profile was made for (--version to choose another). airlock agent
run prefers this copy over one on your PATH. Needs npm on the host.`,
		Args: oneArg("an agent name"),
		RunE: func(c *cobra.Command, args []string) error {
			o.Name = args[0]
			if runF != nil {
				return runF(o)
			}
			return agentInstallRun(o)
		},
	}
	c.Flags().StringVar(&o.Version, "version", "", "the npm version to install (default: the version airlock's profile is pinned to)")
	return c
}

func agentInstallRun(o *agentInstallOptions) error {
	p, err := agents.Lookup(o.Name)
	if err != nil {
		return usageError{err.Error()}
	}
	v, err := agentrun.Install(p, o.Version, o.IO.ErrOut)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.IO.ErrOut, "airlock: %s %s installed: airlock agent run %s\n", p.Display, v, p.Name)
	return nil
}

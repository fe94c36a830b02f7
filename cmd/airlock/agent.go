package main

import (
	"errors"
	"fmt"
	"io"
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
	"github.com/airlock-dev/airlock/internal/secrets"
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
	c.AddCommand(newAgentRunCmd(nil), newAgentLsCmd(nil), newAgentInstallCmd(nil), newAgentSessionsCmd(nil))
	return c
}

// agentRunOptions is what airlock agent run needs.
type agentRunOptions struct {
	IO     *ioStreams
	Run    *runOptions // every flag of airlock run
	Name   string      // the agent
	Args   []string    // the agent's own arguments (after --)
	Resume string      // --resume
	// KeepSet and TTYSet say whether --keep and --tty were given: an agent
	// is kept and given the terminal unless told otherwise.
	KeepSet, TTYSet bool
	// Config loads the run's config from the files and flags.
	Config func() (*config.Loaded, error)
}

func newAgentRunCmd(runF func(*agentRunOptions) error) *cobra.Command {
	o := &runOptions{}
	ao := &agentRunOptions{IO: systemIO(), Run: o}
	c := &cobra.Command{
		Use:   "run [NAME] [run flags] [-- AGENT ARGS...]",
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

Without NAME, the agent named by agents.default in your config runs. The
agents section of config sets, per agent, its keys (which of its key
variables it gets), hosts (allowed besides its provider's), args (before
those after --), limits, budget, backend and image; a flag still wins.
airlock config show --origin shows them and where each was set.

After the run, the agent's own session id is recorded: airlock agent
sessions lists them, --resume ID (or --resume last) goes on with one. The
sandbox is kept, so airlock audit ID shows what the agent reached and
airlock get ID what it spent (--keep=false to drop it; airlock rm ID).`,
		Example: `  ANTHROPIC_API_KEY=... airlock agent run claude -- -p "add a test for parse()"
  OPENAI_API_KEY=... airlock agent run codex -- exec "fix the build"
  airlock agent run gemini --workspace-mode overlay     # review before apply
  airlock agent run claude --branch fix-login -- -p "fix the login"   # its own worktree and branch
  airlock agent run claude --ask                        # unknown hosts wait for you
  airlock agent run claude --resume last -- -p "now the docs"
  airlock agent run -- -p "fix the lint"               # the agent config's agents.default names`,
		Args: func(c *cobra.Command, args []string) error {
			if d := c.ArgsLenAtDash(); len(args) > 1 && d != 1 && d != 0 {
				return usageError{fmt.Sprintf("unexpected argument %q: the agent's own arguments go after --, as in airlock agent run %s -- -p \"PROMPT\"", args[1], args[0])}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			ao.Name, ao.Args = "", args
			if len(args) > 0 && c.ArgsLenAtDash() != 0 {
				ao.Name, ao.Args = args[0], args[1:] // else: the default agent, and every argument is its own
			}
			ao.KeepSet, ao.TTYSet = c.Flags().Changed("keep"), c.Flags().Changed("tty")
			ao.Config = func() (*config.Loaded, error) { return runConfig(c, o) }
			if runF != nil {
				return runF(ao)
			}
			return agentRun(ao)
		},
	}
	addRunFlags(c.Flags(), o)
	c.Flags().StringVar(&ao.Resume, "resume", "", "go on with the agent's session `ID` (from airlock agent sessions), or last")
	return c
}

func agentRun(ao *agentRunOptions) (err error) {
	o := ao.Run
	defer o.dropOnError(&err)
	var p *agents.Profile
	if ao.Name != "" {
		if p, err = agents.Lookup(ao.Name); err != nil {
			return usageError{err.Error()}
		}
	}
	cfg, err := ao.Config()
	if err != nil {
		return err
	}
	if p == nil {
		if p, err = defaultAgent(cfg); err != nil {
			return err
		}
	}
	p, args, err := applyAgentConfig(cfg, p, ao.Args)
	if err != nil {
		return err
	}
	sc := &cfg.Spec
	pr, err := agentrun.Prepare(agentrun.Request{Profile: p, Spec: sc, Args: args, Resume: ao.Resume, Stderr: ao.IO.ErrOut, Quiet: o.quiet})
	var bad agentrun.ServersError
	if errors.As(err, &bad) {
		return usageError{err.Error()}
	}
	if err != nil {
		return err
	}
	defer pr.Stop()
	if !ao.KeepSet {
		// An agent's session is worth its audit: what it reached, what it
		// spent (airlock audit ID, airlock get ID). --keep=false drops it.
		o.keep = true
	}
	if !ao.TTYSet {
		// An agent is interactive unless told otherwise: give it the terminal.
		o.tty = term.IsTerminal(os.Stdin) && term.IsTerminal(os.Stdout)
	}
	spec, err := runSpec(cfg, o, pr.Argv)
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
			fmt.Fprintf(ao.IO.ErrOut, "airlock: note: the repository's own %s settings apply inside (%s); they cannot widen what the sandbox allows\n", p.Display, strings.Join(present, ", "))
		}
	}
	if o.detach {
		// Its keys go to the background supervisor in memory; a login's
		// token is kept fresh by this process, which does not stay.
		if err := secrets.WriteHandover(io.Discard, pr.Secrets); err != nil {
			var names []string
			for _, k := range p.Keys {
				names = append(names, k.Env)
			}
			return usageError{fmt.Sprintf("airlock agent run -d needs %s's API key on the host (%s): the login it would use is kept fresh by a foreground run only; set the key, or run without -d (in tmux, say)", p.Display, strings.Join(names, " or "))}
		}
	}
	started := time.Now()
	code, err := launch(spec, o, pr.Env, pr.Secrets)
	if err != nil {
		return err
	}
	if o.detach { // its keys went to the background supervisor, in memory
		return nil
	}
	agentrun.RecordSession(p, pr.Project, sc.Workspace.Path, pr.Home, started, code, ao.IO.ErrOut, o.quiet)
	return exitError{code}
}

// defaultAgent is the agent config's agents.default names, or a usage
// error saying how to name one.
func defaultAgent(cfg *config.Loaded) (*agents.Profile, error) {
	name := cfg.Spec.Agents.Default
	if name == "" {
		return nil, usageError{"which agent? name one (airlock agent run claude) or set a default with airlock config edit (agents: {default: claude}); known agents: " + strings.Join(agents.Names(), ", ")}
	}
	p, err := agents.Lookup(name)
	if err != nil {
		return nil, usageError{fmt.Sprintf("%s: %v", cfg.AgentOrigin("default"), err)}
	}
	return p, nil
}

// applyAgentConfig makes cfg the config of p's run (config.ApplyAgent)
// and returns p with only the keys its settings give it, and the agent's
// arguments: its configured args, then those after --. Settings for an
// agent airlock does not know are an error, as an unknown key is.
func applyAgentConfig(cfg *config.Loaded, p *agents.Profile, args []string) (*agents.Profile, []string, error) {
	for _, n := range cfg.Spec.Agents.Names() {
		if _, err := agents.Lookup(n); err != nil {
			return nil, nil, usageError{fmt.Sprintf("%s: %v", cfg.AgentOrigin(n), err)}
		}
	}
	a := cfg.ApplyAgent(p.Name)
	if a == nil {
		return p, args, nil
	}
	if len(a.Keys) > 0 {
		var have []string
		for _, k := range p.Keys {
			have = append(have, k.Env)
		}
		q := *p
		q.Keys = nil
		for _, want := range a.Keys {
			i := slices.Index(have, want)
			if i < 0 {
				return nil, nil, usageError{fmt.Sprintf("%s: keys: %s is not one of %s's keys (%s)", cfg.AgentOrigin(p.Name), want, p.Display, strings.Join(have, ", "))}
			}
			q.Keys = append(q.Keys, p.Keys[i])
		}
		p = &q
	}
	return p, append(slices.Clone(a.Args), args...), nil
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

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/supervisor"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/trace"
)

type runOptions struct {
	workspace string
	tty       bool
	detach    bool
	name      string
	keep      bool
	quiet     bool
	watch     bool
	scratch   []string
	noConfig  bool
	ask       bool
	noIDMap   bool
	workdir   string
	branch    string
	// devcontainer is --devcontainer's PATH (devcontainerAuto without one).
	devcontainer string
	// dropBranch removes the --branch worktree made for a run that then
	// did not start (nothing half-made).
	dropBranch func()
	specFD     int // --spec-fd: the whole spec on this descriptor (internal/childspec)
}

const (
	superviseCmd = "__supervise"
)

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run [flags] [--] CMD [ARGS...]",
		Short: "Run a command in a new sandbox",
		Long: `Run CMD in a new sandbox and exit with its status.

Inside, the host's filesystem is visible read-only; the workspace (default:
the current directory) is writable at the same path; /tmp and the home
directory are private and empty (your real home is hidden); secrets such as
~/.ssh, cloud credentials, /etc/shadow and container sockets are always
hidden. There is no capability, and no way to see or signal host processes.
Writes elsewhere fail with "Read-only file system".

There is no network unless --allow-host (or --secret) lets something out:
then every packet goes through airlock's gateway, which answers DNS itself
(refused names do not exist), allows only the named hosts, resolves names on
the host and refuses private addresses, intercepts HTTPS with a local CA the
sandbox trusts, and records each request (airlock audit NAME, for a sandbox
kept after it ends: see below). As root the sandbox gets a network interface
into the gateway (transparent: any program works); where this user cannot
make one, the gateway is an HTTP proxy and HTTP(S)_PROXY is set inside.
'airlock doctor' says which you get.

Workspace modes (--workspace-mode):
  bind      the directory itself, live (default). A manifest is taken before
            start; after exit risky changes are reported. With --protect-git
            .git cannot be moved or replaced and what git reads to run or
            read elsewhere (config, hooks, commondir, info, alternates, ...)
            is read-only inside; after exit what changed anyway is restored,
            and git dirs and gitdir: files the run made or changed are
            defused (renamed NAME.airlock-defused) and reported.
  overlay   copy-on-write over the directory: the host sees nothing until you
            apply. Starts as fast whatever the tree's size.
  copy      a copy made at start (--exclude leaves paths out); copied back
            after review.
After an overlay or copy run, with a terminal, airlock asks
"Apply 12 modified, 3 created, 1 deleted to DIR? [y/N/d]" (d shows the diff);
without one, or on N, the changes are kept: airlock diff ID, airlock apply ID,
airlock discard ID. --auto-apply applies at exit without asking, but holds
back risky changes (git hooks and config, CI files, build scripts, editor and
agent settings, new executables, links out of the workspace) unless
--apply-risky.

When CMD ends, the sandbox is gone, its audit log with it, unless there is
something to come back to: changes waiting for review, a --name or -d
sandbox, or a run airlock ended (--timeout, the memory limit, airlock kill,
a crash: it prints the ID). --keep keeps any run (airlock audit ID, airlock
get ID); airlock rm or airlock prune removes what was kept.

Limits default to ` + strconv.Itoa(config.DefaultPids) + ` processes and half of the machine's memory.`,
		Example: `  airlock run -- make test
  airlock run -t -- bash
  airlock run --memory 2g --cpus 1.5 --timeout 30m -- npm ci
  airlock run -e GOFLAGS -e CI=1 -- go test ./...
  airlock run --rw ~/.cache/go-build -- go build ./...
  airlock run --allow-host '*.github.com' -- git clone https://github.com/org/repo
  airlock run --name fetch --allow-host example.com -- curl https://example.com; airlock audit fetch
  airlock run --secret ANTHROPIC_API_KEY@api.anthropic.com -- claude
  airlock run --workspace-mode overlay -- claude      # review, then apply
  airlock run --branch fix-login -- ./agent.sh        # in a git worktree on fix-login; commits land there
  airlock undo                                        # bind runs that can be put back; airlock undo ID
  airlock run -d --ask --allow-host api.anthropic.com -- claude   # unknown hosts wait: airlock approvals / airlock ui
  airlock run --workspace-mode copy --exclude node_modules --auto-apply -- ./agent
  airlock run -d --name dev          # idle background sandbox; then: airlock exec dev -- CMD
  airlock run -t -d --name sh -- bash   # a terminal in the background: airlock attach sh (Ctrl-P Ctrl-Q leaves it)
  airlock run --ask -- npm install   # a host no rule covers is asked about here: a key answers
  airlock run -p 8000:8000 --allow-host pypi.org -- python3 -m http.server 8000   # then: curl http://127.0.0.1:8000/
  airlock trust --devcontainer && airlock run --devcontainer -- make test   # in .devcontainer/devcontainer.json's environment`,
		Args: func(c *cobra.Command, args []string) error {
			if o.specFD >= 0 {
				return nil // checked by runChild
			}
			if len(args) == 0 && !o.detach {
				return usageError{"no command given: use airlock run [flags] -- CMD [ARGS...]"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if o.specFD >= 0 {
				return runChild(c, o, args)
			}
			return run(c, o, args)
		},
	}
	c.Flags().SetInterspersed(false) // everything after CMD belongs to CMD
	addRunFlags(c.Flags(), o)
	c.Flags().StringVar(&o.workdir, "workdir", "", "run CMD in `DIR`, an absolute path inside (default: the workspace)")
	c.Flags().StringVar(&o.devcontainer, "devcontainer", "", "docker backend: run in the environment the workspace's devcontainer.json describes (image or Dockerfile build, env, lifecycle commands run inside); --devcontainer=PATH names the file (default .devcontainer/devcontainer.json or .devcontainer.json); trust it first with airlock trust --devcontainer")
	c.Flags().Lookup("devcontainer").NoOptDefVal = devcontainerAuto
	c.Flags().IntVar(&o.specFD, "spec-fd", -1, "read the whole spec as JSON from descriptor `N` (how airlock starts a host command's or an MCP server's sandbox)")
	c.Flags().MarkHidden("spec-fd")
	return c
}

// addRunFlags registers the flags every sandbox-making command shares
// (airlock run, airlock agent run).
func addRunFlags(f *pflag.FlagSet, o *runOptions) {
	f.StringVarP(&o.workspace, "workspace", "w", "", "directory the sandbox may change (default: the current directory)")
	addSettingFlags(f)
	f.BoolVarP(&o.tty, "tty", "t", false, "run CMD on a terminal (for shells and interactive tools)")
	f.BoolVarP(&o.detach, "detach", "d", false, "run in the background and print the sandbox's ID")
	f.StringVar(&o.name, "name", "", "name the sandbox, for exec, logs, kill, audit (a named sandbox is kept after it ends, until airlock rm)")
	f.BoolVar(&o.keep, "keep", false, "keep the sandbox's record and audit log after it ends (airlock audit ID, airlock get ID; airlock rm ID when done)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "do not print airlock's warnings")
	f.StringVar(&o.branch, "branch", "", "run in a git worktree of the workspace's repository on `BRANCH` (made from HEAD if new), kept under the state dir: commits land on BRANCH; airlock rm removes the worktree")
	f.BoolVar(&o.ask, "ask", false, "a connection to a host no rule covers waits for your decision (airlock approvals, airlock ui, or this terminal) instead of failing")
	f.BoolVar(&o.noConfig, "no-config-files", false, "read no config file: defaults and these flags only")
	f.BoolVar(&o.watch, "watch-files", false, "record every file created, written or deleted in the workspace and writable mounts in the audit log (airlock audit ID)")
	f.StringArrayVar(&o.scratch, "scratch", nil, "an empty writable directory at `PATH` inside that lives as long as the sandbox (repeatable)")
	f.Bool("no-hide", false, "do not hide the built-in patterns ("+strings.Join(config.DefaultHide, " ")+"); --hide and filesystem.hide still apply")
	f.BoolVar(&o.noIDMap, "no-idmap", false, "as root: run the sandbox as host root, without its own id range and idmapped mounts (unsafe: root-owned files that are not hidden become readable; for where those are unavailable)")
}

// addSettingFlags defines the run flags that are config keys, as the config
// schema describes them (config.RunFlags); flagLayer reads the ones set.
func addSettingFlags(f *pflag.FlagSet) {
	for _, r := range config.RunFlags() {
		switch {
		case r.List:
			f.StringArrayP(r.Flag, r.Short, nil, r.Usage)
		case r.Bool:
			f.BoolP(r.Flag, r.Short, r.Default == "true", r.Usage)
		case r.Int:
			n, _ := strconv.ParseInt(r.Default, 10, 64)
			f.Int64P(r.Flag, r.Short, n, r.Usage)
		case r.Float:
			x, _ := strconv.ParseFloat(r.Default, 64)
			f.Float64P(r.Flag, r.Short, x, r.Usage)
		case r.Duration:
			d, _ := time.ParseDuration(r.Default)
			f.DurationP(r.Flag, r.Short, d, r.Usage)
		default:
			f.StringP(r.Flag, r.Short, r.Default, r.Usage)
		}
	}
}

func run(c *cobra.Command, o *runOptions, args []string) (err error) {
	defer o.dropOnError(&err)
	// The config files, then the flags the user set, make one config.Spec.
	trace.Mark("cli parsed")
	cfg, err := runConfig(c, o)
	if err != nil {
		return err
	}
	trace.Mark("config read")
	if o.devcontainer != "" {
		if err := devcontainerBackend(&cfg.Spec); err != nil {
			return err
		}
	}
	spec, err := runSpec(cfg, o, args)
	if err != nil {
		return err
	}
	trace.Mark("spec made")
	env := cfg.Spec.Env
	if o.devcontainer != "" {
		if err := applyDevcontainer(&spec, o.devcontainer, &env); err != nil {
			return err
		}
	}
	code, err := launch(spec, o, env, nil)
	if err != nil {
		return err
	}
	return exitError{code}
}

// launch registers spec's sandbox and runs it in the foreground (returning
// the command's exit code), or starts it detached. env are --env entries
// (config.SandboxEnv's extra); secrets given by value need a foreground run.
func launch(spec engine.Spec, o *runOptions, env []string, secs []*secrets.Secret) (int, error) {
	// A foreground run is latency-bound: the sandbox is prepared first (a
	// native guest is cloned, and its runtime starts, milliseconds), then
	// registered and its environment built meanwhile. Not alongside: the
	// clone copies this process's page tables, and work beside it only
	// slows it (0.3 ms later, measured). A crash from here on leaves
	// nothing that outlives this process: the guest dies with it
	// (Pdeathsig), the id slot is an flock, and its cgroup is named after a
	// pid (this process's; on cgroup v1 the guest's), for prune's sweep to
	// find once that process is gone.
	var pending backend.Pending
	if !o.detach {
		p, err := engine.Prepare(&spec, "")
		if err != nil {
			return 0, err
		}
		pending = p
		defer func() {
			if pending != nil { // never handed on: an error came first
				pending.Close()
			}
		}()
		trace.Mark("prepared")
	}
	store, err := openStore()
	if err != nil {
		return 0, err
	}
	if err := underCap(store, spec.Config.Limits.MaxSandboxes); err != nil {
		return 0, err
	}
	var h *state.Handle
	if !o.detach && o.name == "" {
		// Its directory is made by the engine once nothing waits on it
		// (state.Store.Reserve); the id is all the start needs before.
		h, err = store.Reserve()
	} else {
		h, err = store.Create(o.name)
	}
	if err != nil {
		if errors.Is(err, state.ErrNameTaken) {
			return 0, fmt.Errorf("a sandbox named %q exists already: pick another --name, or remove it with airlock rm %s", o.name, o.name)
		}
		return 0, err
	}
	if h.Published() {
		trace.Mark("state dir entry made")
	} else {
		trace.Mark("state dir entry reserved")
	}
	if spec.Env, err = sandboxEnv(spec, h.ID(), env); err != nil {
		h.Remove()
		return 0, err
	}
	trace.Mark("env made")
	if o.detach {
		if err := supervisor.Detach(h, spec, "", superviseCmd, secs); err != nil {
			return 0, err
		}
		if ports, _ := spec.Published(); !spec.Quiet { // the supervisor's own warnings go to its log
			for _, w := range engine.PublishWarnings(ports) {
				fmt.Fprintf(os.Stderr, "airlock: warning: %s\n", w)
			}
		}
		fmt.Println(h.ID())
		return 0, nil
	}
	p := pending
	pending = nil
	return supervisor.Run(h, spec, term.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, supervisor.Options{Pending: p, Secrets: secs})
}

func sandboxEnv(spec engine.Spec, id string, extra []string) ([]string, error) {
	hostHome, _ := os.UserHomeDir()
	env, warnings, err := config.SandboxEnv(os.Environ(), backend.SandboxHome(hostHome), id, extra)
	if !spec.Quiet {
		for _, w := range warnings {
			fmt.Fprintf(os.Stderr, "airlock: warning: %s\n", w)
		}
	}
	return env, err
}

func existingDir(p, what, hint string) (string, error) {
	abs, err := existingPath(p, what)
	if err != nil {
		if hint != "" {
			return "", fmt.Errorf("%v: %s", err, hint)
		}
		return "", err
	}
	if st, _ := os.Stat(abs); !st.IsDir() {
		return "", fmt.Errorf("%s %s is not a directory", what, p)
	}
	return abs, nil
}

// existingPath makes p absolute with symlinks resolved: the sandbox mounts the
// real location, at the same path the user named.
func existingPath(p, what string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %v", what, p, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s %s does not exist", what, p)
		}
		return "", fmt.Errorf("%s %s: %v", what, p, err)
	}
	return real, nil
}

func openStore() (*state.Store, error) {
	root, err := state.Root()
	if err != nil {
		return nil, err
	}
	return state.Open(root)
}

// underCap refuses a start when this user (this state dir) already runs
// max sandboxes (limits.max_sandboxes), naming them. Two starts at the same
// instant can both pass: the cap is a guard against runaway starts, not a
// lock.
func underCap(store *state.Store, max int64) error {
	if max <= 0 {
		return nil
	}
	es, err := store.List()
	if err != nil {
		return err
	}
	var running []string
	for _, e := range es {
		if e.Status.State == state.Running || e.Status.State == state.Creating {
			id := e.Record.ID
			if e.Record.Name != "" {
				id += " (" + e.Record.Name + ")"
			}
			running = append(running, id+" in "+config.DisplayPath(e.Record.Workspace))
		}
	}
	if int64(len(running)) < max {
		return nil
	}
	return fmt.Errorf("limits.max_sandboxes is %d and %d run already: %s; stop one with airlock kill ID, or raise the limit", max, len(running), strings.Join(running, ", "))
}

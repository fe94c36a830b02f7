package main

import (
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/term"
	"github.com/airlock-dev/airlock/internal/trace"
)

// execOptions is what airlock exec needs.
type execOptions struct {
	IO   *ioStreams
	Ref  string   // the sandbox, by ID or name
	Argv []string // the command
	TTY  bool
	Env  []string // --env entries
	Dir  string   // the working directory inside; "" is the workspace
}

func newExecCmd(runF func(*execOptions) error) *cobra.Command {
	o := &execOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "exec [flags] ID|NAME [--] CMD [ARGS...]",
		Short: "Run a command in a running sandbox",
		Long: `Run CMD in a running sandbox (one started with airlock run -d, or any
sandbox still running) with this terminal's stdin, stdout and stderr, and exit
with its status. It gets the sandbox's environment plus --env.`,
		Example: `  airlock exec dev -- npm test
  airlock exec -t dev -- bash`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError{"expected a sandbox and a command: airlock exec ID|NAME -- CMD [ARGS...]"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if args[1] == "--" { // flags stop at the sandbox's name, so "--" arrives here
				args = append(args[:1], args[2:]...)
				if len(args) < 2 {
					return usageError{"no command given: airlock exec ID|NAME -- CMD [ARGS...]"}
				}
			}
			o.Ref, o.Argv = args[0], args[1:]
			if runF != nil {
				return runF(o)
			}
			return execRun(o)
		},
	}
	c.Flags().SetInterspersed(false)
	c.Flags().BoolVarP(&o.TTY, "tty", "t", false, "run CMD on a terminal")
	c.Flags().StringArrayVarP(&o.Env, "env", "e", nil, "pass host variable `NAME`, or set NAME=VALUE (repeatable)")
	c.Flags().StringVarP(&o.Dir, "workdir", "C", "", "working directory inside (default: the workspace)")
	return c
}

func execRun(o *execOptions) error {
	// The runtime takes ~0.4 ms to catch the signals passed on to the
	// command (a round trip to its signal thread each): begun here,
	// it goes on while the sandbox is found and dialed and the command
	// starts, and nothing waits for it (waiting before the request
	// cost ~3% of an exec of /bin/true). A signal in the command's
	// first fraction of a millisecond so ends airlock exec instead of
	// reaching the command, and the sandbox then kills the command
	// (what a client that went away started goes with it). They stay
	// caught until this process exits: stopping would cost as much
	// again, for nothing.
	sigs := make(chan os.Signal, 8)
	go signal.Notify(sigs, term.Forwarded...)
	e, err := resolveRunning(o.Ref)
	if err != nil {
		return err
	}
	trace.Mark("exec: sandbox found")
	extra, warnings, err := config.EnvFlags(os.Environ(), o.Env)
	if err != nil {
		return usageError{err.Error()}
	}
	for _, w := range warnings {
		fmt.Fprintf(o.IO.ErrOut, "airlock: warning: %s\n", w)
	}
	cl, err := control.Dial(e.SocketPath())
	if err != nil {
		return err
	}
	defer cl.Close()
	trace.Mark("exec: supervisor dialed")
	code, err := cl.Exec(&proto.Exec{Argv: o.Argv, Env: extra, Dir: o.Dir, TTY: o.TTY},
		term.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, sigs)
	if err != nil {
		return err
	}
	return exitError{code}
}

// resolve finds a sandbox by ID, unique ID prefix or name.
func resolve(ref string) (state.Entry, error) {
	store, err := openStore()
	if err != nil {
		return state.Entry{}, err
	}
	e, err := store.Resolve(ref)
	if err != nil {
		return e, fmt.Errorf("%v (airlock ls lists sandboxes)", err)
	}
	return e, nil
}

// resolveRunning is resolve for a sandbox that must be running.
func resolveRunning(ref string) (state.Entry, error) {
	e, err := resolve(ref)
	if err != nil {
		return e, err
	}
	if e.Status.State != state.Running {
		return e, fmt.Errorf("sandbox %s is %s, not running", ref, e.Status.State)
	}
	return e, nil
}

package main

import (
	"github.com/spf13/cobra"
)

var version = "0.1.0-dev"

// subcommand is one of airlock's commands (see subcommands, in commands.go).
type subcommand struct {
	name string
	make func() *cobra.Command
}

// newRootCmd builds the command tree: every subcommand, or with only the
// one named so (what an invocation that names it runs), that one alone:
// cobra would build every command and its flags each time (~0.2 ms).
func newRootCmd(only string) *cobra.Command {
	root := &cobra.Command{
		Use:   "airlock",
		Short: "Run AI coding agents and the code they write in a sandbox",
		Long: `airlock runs a command — an AI coding agent, a build, a test — in a sandbox
where the only files it can change are its workspace, it has no network, it
cannot see your home directory, credentials or other processes, and it holds
no privilege on the host. No daemon, no image: the host is its read-only root.

  airlock run -- make test                 run in the current directory
  airlock run -t -- bash                   an interactive shell
  airlock run -d --name dev                a background sandbox
  airlock exec dev -- npm test             run in it
  airlock run --workspace-mode overlay -- claude   review changes at exit
  airlock diff ID / apply ID / discard ID  review later
  airlock ls                               list sandboxes
  airlock doctor                           what this machine supports

Exit status is the command's own; 125 when airlock itself fails.`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err.Error()} })
	root.CompletionOptions.DisableDefaultCmd = true
	for _, sc := range subcommands {
		if only == "" || sc.name == only {
			root.AddCommand(sc.make())
		}
	}
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print airlock's version",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			c.Println("airlock " + version)
			return nil
		},
	}
}

func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{"unexpected argument " + args[0]}
	}
	return nil
}

func oneArg(what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{"expected one " + what}
		}
		return nil
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/hostexec"
	"github.com/airlock-dev/airlock/internal/supervisor"
)

func newHostexecCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hostexec CMD [ARG...]",
		Short: "Inside a sandbox: have the host run a command in a sandbox of its own, if its rules or a human allow",
		Long: `hostexec asks airlock to run CMD for this sandbox, without a shell, in a
sandbox of its own on the host: the workspace's host directory (the same
subdirectory when run from one) and exactly what the matching rule grants
(hosts, secrets as placeholders, host paths); never with the host's
authority. The host's hostexec rules decide: auto_deny, then the rules that
run at once, then those that ask (a human decides, shown the whole command and
what it will reach); anything else is denied. Output streams back; the exit
status is the command's, 125 when airlock refused or failed. Also run as
'hostexec' by argv[0].`,
		DisableFlagParsing: true, // every argument is the command's
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 && args[0] == "--" {
				args = args[1:]
			}
			if len(args) == 0 {
				return usageError{"hostexec needs a command"}
			}
			if args[0] == "-h" || args[0] == "--help" {
				return c.Help()
			}
			if code := hostexecRun(args); code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
}

// hostexecRun sends argv through the sandbox's broker: HTTP_PROXY in the
// proxy door, airlock.internal resolving to the gateway in the transparent
// one. Errors of its own are one line and 125.
func hostexecRun(argv []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cwd, _ := os.Getwd()
	req := hostexec.Request{Argv: argv, Dir: hostexec.WorkspaceDir(os.Getenv("AIRLOCK_WORKSPACE"), cwd)}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	res, err := hostexec.Run(ctx, client, hostexec.URL, req, os.Stdout, os.Stderr)
	var refused *hostexec.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Reason == hostexec.RefusedNotFound:
		fmt.Fprintf(os.Stderr, "airlock hostexec: %s\n", refused.Error())
		return 127
	case err != nil:
		fmt.Fprintf(os.Stderr, "airlock hostexec: %v\n", err)
		return supervisor.ExitAirlock
	case res.Reason != hostexec.EndExited && res.Message != "":
		fmt.Fprintf(os.Stderr, "airlock hostexec: %s\n", res.Message)
	}
	return res.Exit
}

package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/state"
)

// portOptions is what airlock port needs.
type portOptions struct {
	IO   *ioStreams
	Ref  string // the sandbox's ID or name
	Port int    // the sandbox's port to show alone; 0 for all
	// Resolve finds a sandbox by ID or name (in the state dir).
	Resolve func(string) (state.Entry, error)
}

func newPortCmd(runF func(*portOptions) error) *cobra.Command {
	o := &portOptions{IO: systemIO(), Resolve: resolve}
	return &cobra.Command{
		Use:   "port ID|NAME [SANDBOX_PORT]",
		Short: "List a sandbox's published ports",
		Long: `List the ports a running sandbox publishes (run -p, config ports:), one
a line as SANDBOX_PORT/tcp -> HOST_IP:HOST_PORT; with SANDBOX_PORT, print only
the host addresses that reach it (for scripts: a port -p took from the host
is found here).`,
		Example: `  airlock run -d --name web -p 8000 --allow-host pypi.org -- python3 -m http.server 8000
  airlock port web             # 8000/tcp -> 127.0.0.1:41234
  curl "http://$(airlock port web 8000)/"`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError{"expected a sandbox ID or name, and optionally its port"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.Ref = args[0]
			if len(args) == 2 {
				n, err := strconv.Atoi(strings.TrimSuffix(args[1], "/tcp"))
				if err != nil || n < 1 || n > 65535 {
					return usageError{fmt.Sprintf("%q is not a port: use a number from 1 to 65535", args[1])}
				}
				o.Port = n
			}
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return portRun(o)
		},
	}
}

func portRun(o *portOptions) error {
	e, err := o.Resolve(o.Ref)
	if err != nil {
		return err
	}
	if e.Status.State != state.Running {
		return fmt.Errorf("sandbox %s is %s: its ports closed with it", o.Ref, e.Status.State)
	}
	found := false
	for _, p := range e.Record.Ports {
		host := net.JoinHostPort(p.HostIP, strconv.Itoa(p.HostPort))
		switch {
		case o.Port == 0:
			fmt.Fprintf(o.IO.Out, "%d/tcp -> %s\n", p.SandboxPort, host)
		case o.Port == p.SandboxPort:
			fmt.Fprintln(o.IO.Out, host)
		default:
			continue
		}
		found = true
	}
	if o.Port != 0 && !found {
		return fmt.Errorf("sandbox %s publishes no port %d (airlock port %s lists what it does)", o.Ref, o.Port, o.Ref)
	}
	return nil
}

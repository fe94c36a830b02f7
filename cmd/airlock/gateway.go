package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/egress"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/state"
)

// gatewayOptions is what airlock gateway needs.
type gatewayOptions struct {
	IO         *ioStreams
	Listen     string         // unix:PATH or tcp:127.0.0.1:PORT
	ConfigFile string         // rules as JSON; the flags add to them
	Flags      config.Network // the rule flags (secrets apart, as written)
	Secrets    []string       // --secret flags
}

func newGatewayCmd(runF func(*gatewayOptions) error) *cobra.Command {
	o := &gatewayOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "gateway --listen unix:PATH|tcp:127.0.0.1:PORT [--config FILE] [flags]",
		Short: "Run the gateway's explicit proxy front door on its own, for any client",
		Long: `Run the gateway that sandboxes use, as a standalone HTTP proxy (CONNECT and
absolute URIs) for any client that honours HTTPS_PROXY: the same policy,
host-side name resolution, HTTPS interception with airlock's CA, secret
placeholders and audit log. It prints the client's settings (proxy URL with
its 256-bit token, CA bundle, secret placeholders) as NAME=VALUE lines, then
serves until interrupted. A request without the token gets 407.

--config FILE is JSON with the same rules as the flags, which add to it:
  {"allow_hosts": ["*.github.com"], "deny_hosts": [], "endpoints": [],
   "secrets": ["API_KEY@api.example.com"], "add_hosts": [], "upstream_ca": ""}`,
		Example: `  airlock gateway --listen tcp:127.0.0.1:3128 --allow-host example.com > proxy.env
  env $(grep -v '^#' proxy.env) curl https://example.com/`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.Listen == "" {
				return usageError{"--listen is required: unix:PATH or tcp:127.0.0.1:PORT"}
			}
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return gatewayRun(o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Listen, "listen", "", "where to listen: unix:`PATH` or tcp:127.0.0.1:PORT (port 0 picks one)")
	f.StringVar(&o.ConfigFile, "config", "", "rules from a JSON `FILE` (see above)")
	f.StringArrayVar(&o.Flags.AllowHosts, "allow-host", nil, "let clients reach `HOST` (as airlock run)")
	f.StringArrayVar(&o.Flags.TunnelHosts, "tunnel-host", nil, "let clients reach `HOST` through a blind TLS tunnel (as airlock run)")
	f.StringArrayVar(&o.Flags.DenyHosts, "deny-host", nil, "never reach `HOST`")
	f.StringArrayVar(&o.Flags.Endpoints, "allow-endpoint", nil, "only these requests to a host: 'HOST METHOD /path/*'")
	f.StringArrayVar(&o.Secrets, "secret", nil, "keep a credential on the host: NAME@HOST[,HOST] (as airlock run)")
	f.StringArrayVar(&o.Flags.AddHosts, "add-host", nil, "resolve `NAME:IP` statically")
	f.StringVar(&o.Flags.UpstreamCA, "upstream-ca", "", "also trust this PEM `FILE` for upstream servers")
	return c
}

// gatewayNetwork is the gateway's rules: the config file's, then the flags'.
func gatewayNetwork(o *gatewayOptions) (config.Network, error) {
	var n config.Network
	if o.ConfigFile != "" {
		var err error
		if n, err = egress.ReadGatewayConfig(o.ConfigFile); err != nil {
			return n, err
		}
	}
	flags := o.Flags
	n.AllowHosts = append(n.AllowHosts, flags.AllowHosts...)
	n.TunnelHosts = append(n.TunnelHosts, flags.TunnelHosts...)
	n.DenyHosts = append(n.DenyHosts, flags.DenyHosts...)
	n.Endpoints = append(n.Endpoints, flags.Endpoints...)
	for _, f := range o.Secrets {
		sp, err := secrets.ParseSpec(f)
		if err != nil {
			return n, err
		}
		n.Secrets = append(n.Secrets, sp)
	}
	n.AddHosts = append(n.AddHosts, flags.AddHosts...)
	if flags.UpstreamCA != "" {
		n.UpstreamCA = flags.UpstreamCA
	}
	return n, nil
}

func gatewayRun(o *gatewayOptions) error {
	n, err := gatewayNetwork(o)
	if err != nil {
		return err
	}
	root, err := state.Root()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return egress.ServeGateway(ctx, egress.GatewayOptions{
		Listen: o.Listen, Network: n, Dir: filepath.Join(root, "gateway"), Out: o.IO.Out,
	})
}

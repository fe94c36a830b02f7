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

func newGatewayCmd() *cobra.Command {
	var (
		listen, configFile string
		flags              config.Network
		secretFlags        []string
	)
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
			if listen == "" {
				return usageError{"--listen is required: unix:PATH or tcp:127.0.0.1:PORT"}
			}
			var n config.Network
			if configFile != "" {
				var err error
				if n, err = egress.ReadGatewayConfig(configFile); err != nil {
					return err
				}
			}
			n.AllowHosts = append(n.AllowHosts, flags.AllowHosts...)
			n.TunnelHosts = append(n.TunnelHosts, flags.TunnelHosts...)
			n.DenyHosts = append(n.DenyHosts, flags.DenyHosts...)
			n.Endpoints = append(n.Endpoints, flags.Endpoints...)
			for _, f := range secretFlags {
				sp, err := secrets.ParseSpec(f)
				if err != nil {
					return err
				}
				n.Secrets = append(n.Secrets, sp)
			}
			n.AddHosts = append(n.AddHosts, flags.AddHosts...)
			if flags.UpstreamCA != "" {
				n.UpstreamCA = flags.UpstreamCA
			}
			root, err := state.Root()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return egress.ServeGateway(ctx, egress.GatewayOptions{
				Listen: listen, Network: n, Dir: filepath.Join(root, "gateway"), Out: c.OutOrStdout(),
			})
		},
	}
	f := c.Flags()
	f.StringVar(&listen, "listen", "", "where to listen: unix:`PATH` or tcp:127.0.0.1:PORT (port 0 picks one)")
	f.StringVar(&configFile, "config", "", "rules from a JSON `FILE` (see above)")
	f.StringArrayVar(&flags.AllowHosts, "allow-host", nil, "let clients reach `HOST` (as airlock run)")
	f.StringArrayVar(&flags.TunnelHosts, "tunnel-host", nil, "let clients reach `HOST` through a blind TLS tunnel (as airlock run)")
	f.StringArrayVar(&flags.DenyHosts, "deny-host", nil, "never reach `HOST`")
	f.StringArrayVar(&flags.Endpoints, "allow-endpoint", nil, "only these requests to a host: 'HOST METHOD /path/*'")
	f.StringArrayVar(&secretFlags, "secret", nil, "keep a credential on the host: NAME@HOST[,HOST] (as airlock run)")
	f.StringArrayVar(&flags.AddHosts, "add-host", nil, "resolve `NAME:IP` statically")
	f.StringVar(&flags.UpstreamCA, "upstream-ca", "", "also trust this PEM `FILE` for upstream servers")
	return c
}

package main

import (
	"context"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/mcpproxy"
)

func newMCPBridgeCmd() *cobra.Command {
	var url string
	c := &cobra.Command{
		Use:   "mcp-bridge NAME",
		Short: "Inside a sandbox: serve MCP server NAME on stdio, for clients that cannot speak HTTP",
		Long: `Inside a sandbox, connect stdin and stdout (an MCP client's stdio
transport) to http://airlock.internal/mcp/NAME, where airlock serves MCP
server NAME from config (mcp_servers) with its policy. Configure the agent's
stdio server as: airlock mcp-bridge NAME.`,
		Args: oneArg("MCP server name"),
		RunE: func(c *cobra.Command, args []string) error {
			if url == "" {
				url = mcpproxy.BridgeURL(args[0])
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The proxy door sets HTTP_PROXY; in the transparent one
			// airlock.internal resolves directly.
			hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
			return mcpproxy.Bridge(ctx, os.Stdin, os.Stdout, url, hc)
		},
	}
	c.Flags().StringVar(&url, "url", "", "the endpoint (default http://airlock.internal/mcp/NAME)")
	return c
}

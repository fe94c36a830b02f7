package mcpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BridgeURL is where a sandbox reaches server name's endpoint.
func BridgeURL(name string) string { return "http://airlock.internal/mcp/" + name }

// Bridge copies JSON-RPC messages between a stdio MCP client (in, out) and
// the proxy's Streamable HTTP endpoint, unchanged: the proxy does every
// MCP semantic, the bridge only changes framing. It returns when either
// side closes (nil when the client closed its stdin).
//
// Limitation: the SDK's HTTP transport opens its standalone SSE stream
// only for its own sessions, so server notifications sent outside a
// request (list_changed) do not reach a bridged client; everything inside
// a call (progress, results) does.
func Bridge(ctx context.Context, in io.ReadCloser, out io.WriteCloser, endpoint string, hc *http.Client) error {
	local, err := (&mcp.IOTransport{Reader: in, Writer: out}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("mcp-bridge: stdio: %w", err)
	}
	defer local.Close()
	remote, err := (&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, DisableStandaloneSSE: true}).Connect(ctx)
	if err != nil {
		return fmt.Errorf("mcp-bridge: %s: %w", endpoint, err)
	}
	defer remote.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	pump := func(from, to mcp.Connection, what string) {
		for {
			msg, err := from.Read(ctx)
			if err != nil {
				errc <- fmt.Errorf("%s: read: %w", what, err)
				return
			}
			if err := to.Write(ctx, msg); err != nil {
				errc <- fmt.Errorf("%s: write: %w", what, err)
				return
			}
		}
	}
	go pump(local, remote, "client → proxy")
	go pump(remote, local, "proxy → client")
	err = <-errc
	if errors.Is(err, io.EOF) || ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("mcp-bridge: %w", err)
}

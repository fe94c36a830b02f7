// mcpclient is the MCP client the end-to-end tests run inside a sandbox:
// the official Go SDK over Streamable HTTP to URL (through HTTP_PROXY in the
// proxy door), one tools/call. It prints the result's text and exits 0, or
// 3 when the result is an error result, 1 when the call itself failed.
//
//	mcpclient URL TOOL JSON-ARGS
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: mcpclient URL TOOL JSON-ARGS")
		os.Exit(2)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(os.Args[3]), &args); err != nil {
		fmt.Fprintln(os.Stderr, "args:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	c := mcp.NewClient(&mcp.Implementation{Name: "airlock-e2e", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: os.Args[1], HTTPClient: hc}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(1)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: os.Args[2], Arguments: args})
	if err != nil {
		fmt.Fprintln(os.Stderr, "call:", err)
		os.Exit(1)
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			fmt.Println(t.Text)
		}
	}
	if res.IsError {
		os.Exit(3)
	}
}

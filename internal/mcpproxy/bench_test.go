package mcpproxy

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/mcppolicy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The bar (issue 12): a tools/call through the proxy adds ≤ 2 ms p50 over
// calling server-everything directly. Compare the p50-ms metrics:
//
//	go test -run '^$' -bench ToolsCall ./internal/mcpproxy
func BenchmarkToolsCallDirect(b *testing.B) {
	cmd, _ := DirectLaunch("", everything(b))
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	benchCalls(b, cs)
}

func BenchmarkToolsCallThroughProxy(b *testing.B) {
	cfg := everything(b, mcppolicy.Rule{Tool: "echo", Verdict: mcppolicy.Allow})
	p, err := New([]ServerConfig{cfg}, Env{Launch: DirectLaunch, Exe: "x",
		Guard: &mcppolicy.GuardConfig{Identical: 1 << 30, Window: time.Minute}})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(p.Handler())
	defer func() { p.Close(); hs.Close() }()
	benchCalls(b, connect(b, hs.URL+"/mcp/ev", nil))
}

func benchCalls(b *testing.B, cs *mcp.ClientSession) {
	ctx := context.Background()
	params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}}
	for range 20 { // warm up (JIT, connections)
		if _, err := cs.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
	}
	var took []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("echo: %v %+v", err, res)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100])/1e6, "p99-ms")
}

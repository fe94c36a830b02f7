package mcpproxy

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/mcppolicy"
)

// TestConformance runs the MCP conformance suite's server scenarios
// (@modelcontextprotocol/conformance) against the proxy, with every tool,
// resource and prompt allowed, fronting (1) the npm server-everything and
// (2) the Go SDK's conformance everything-server (built for these
// scenarios; also run directly over HTTP as the baseline). It is slow and
// its pass counts are a measure, not a gate: MCPPROXY_CONFORMANCE=1.
func TestConformance(t *testing.T) {
	if os.Getenv("MCPPROXY_CONFORMANCE") == "" {
		t.Skip("set MCPPROXY_CONFORMANCE=1 to run the MCP conformance suite against the proxy")
	}
	cli, _ := filepath.Abs("testdata/servers/node_modules/@modelcontextprotocol/conformance/dist/index.js")
	if _, err := os.Stat(cli); err != nil {
		t.Skip("npm ci --prefix internal/mcpproxy/testdata/servers first")
	}
	goev := filepath.Join(t.TempDir(), "everything-server")
	if b, err := exec.Command("go", "build", "-o", goev, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server").CombinedOutput(); err != nil {
		t.Fatalf("build the SDK's everything-server: %v\n%s", err, b)
	}
	allow := []mcppolicy.Rule{{Tool: "*", Verdict: mcppolicy.Allow, Name: "all"}, {Tool: "resources/read", Verdict: mcppolicy.Allow}, {Tool: "prompts/get", Verdict: mcppolicy.Allow}}
	proxied := func(t *testing.T, cfg ServerConfig) string {
		cfg.Rules = allow
		p, err := New([]ServerConfig{cfg}, Env{Launch: DirectLaunch, Exe: "x", LogDir: t.TempDir(),
			Guard: &mcppolicy.GuardConfig{Identical: 1 << 20, Window: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(p.Handler())
		t.Cleanup(func() { p.Close(); hs.Close() })
		return hs.URL + "/mcp/" + cfg.Name
	}
	t.Run("npm server-everything behind the proxy", func(t *testing.T) {
		runConformance(t, cli, proxied(t, everything(t)))
	})
	t.Run("SDK everything-server behind the proxy", func(t *testing.T) {
		runConformance(t, cli, proxied(t, ServerConfig{Name: "goev", Command: []string{goev}}))
	})
	t.Run("SDK everything-server directly (baseline)", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		cmd := exec.Command(goev, "-http", addr)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		for range 50 {
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		runConformance(t, cli, "http://"+addr+"/")
	})
}

func runConformance(t *testing.T, cli, url string) {
	args := []string{cli, "server", "--url", url, "-o", t.TempDir()}
	if v, _ := exec.Command("node", "-p", "process.versions.node.split('.')[0]").Output(); strings.TrimSpace(string(v)) < "22" {
		shim, _ := filepath.Abs("testdata/conformance/node20.mjs")
		args = append([]string{"--import", shim}, args...)
	}
	if s := os.Getenv("MCPPROXY_CONFORMANCE_SCENARIO"); s != "" {
		args = append(args, "--scenario", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, "node", args...).CombinedOutput()
	out := string(b)
	if i := strings.Index(out, "=== SUMMARY ==="); i >= 0 && os.Getenv("MCPPROXY_CONFORMANCE_VERBOSE") == "" {
		out = out[i:]
	}
	t.Logf("conformance against %s (%v):\n%s", url, err, out)
	if m := regexp.MustCompile(`Total: (\d+) passed, (\d+) failed`).FindStringSubmatch(string(b)); m != nil {
		t.Logf("TOTAL %s passed, %s failed", m[1], m[2])
	}
}

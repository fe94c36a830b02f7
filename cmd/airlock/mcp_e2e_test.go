//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/internal/testutil"
)

// mcpclientBin is testdata/mcpclient (the official Go SDK's client) built
// once, next to the airlock binary, where uid 65534 can read it too.
var mcpclientBin = sync.OnceValues(func() (string, error) {
	if b := os.Getenv("AIRLOCK_TEST_MCPCLIENT"); b != "" {
		return b, nil
	}
	out := filepath.Join(filepath.Dir(airlockBin), "mcpclient")
	build := exec.Command("go", "build", "-o", out, "./testdata/mcpclient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build mcpclient: %v\n%s", err, b)
	}
	return out, nil
})

// mcpSetup puts the MCP client in dir (the sandbox's /tmp is its own) and
// finds the npm filesystem server, skipping with the reason when missing.
func mcpSetup(t *testing.T, dir string) (client, server, serverDir string) {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	serverDir = filepath.Join(root, "internal", "mcpproxy", "testdata", "servers")
	server = filepath.Join(serverDir, "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	if _, err := os.Stat(server); err != nil {
		t.Skip("no MCP filesystem server: npm ci --prefix internal/mcpproxy/testdata/servers")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("no node for the MCP server")
	}
	built, err := mcpclientBin()
	if err != nil {
		t.Fatal(err)
	}
	client = filepath.Join(dir, "mcpclient")
	if err := testutil.CopyFile(built, client); err != nil {
		t.Fatal(err)
	}
	return client, server, serverDir
}

// TestMCPCallsArePolicedByTheProxy: the npm filesystem server runs in its
// own sandbox; the agent's sandbox reaches it only at
// airlock.internal/mcp/fs through the proxy (the Go SDK client, both doors,
// and mcp-bridge over stdio): an allowed read works, a write outside the
// roots is refused as policy and nothing is written, a write inside
// escalates to the approval queue and lands once approved.
func TestMCPCallsArePolicedByTheProxy(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		e := newEnv(t)
		client, server, serverDir := mcpSetup(t, e.ws)
		root := filepath.Join(t.TempDir(), "files")
		os.MkdirAll(root, 0o777)
		os.Chmod(filepath.Dir(root), 0o755)
		os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from the host"), 0o644)
		cfg := map[string]any{"version": 1, "mcp_servers": map[string]any{"fs": map[string]any{
			"command": []string{"node", server, root},
			"roots":   []string{root},
			"ro":      []string{serverDir}, // the server's code: under /tmp in a clone there, which sandboxes have private
			"rules": []any{
				map[string]any{"tool": "read_text_file", "allow": map[string]any{"path": map[string]any{"path_within": "roots"}}},
				map[string]any{"tool": "write_file", "escalate": map[string]any{"path": map[string]any{"path_within": "roots"}}},
			},
		}}}
		b, _ := json.Marshal(cfg) // JSON is YAML
		e.writeConfig(string(b))
		if r := e.run("run", "-d", "-q", "--name", "m", "--network-mode", mode); r.code != 0 {
			t.Fatalf("run -d with an MCP server: %v", r)
		}
		defer e.run("kill", "--all")
		call := func(tool string, args map[string]any) result {
			a, _ := json.Marshal(args)
			return e.run("exec", "m", "--", client, "http://airlock.internal/mcp/fs", tool, string(a))
		}
		if r := call("read_text_file", map[string]any{"path": filepath.Join(root, "hello.txt")}); r.code != 0 || !strings.Contains(r.stdout, "hello from the host") {
			t.Fatalf("allowed read through the proxy: %v", r)
		}
		outside := filepath.Join(t.TempDir(), "pwned.txt")
		if r := call("write_file", map[string]any{"path": outside, "content": "x"}); r.code != 3 || !strings.Contains(r.stdout, "policy") {
			t.Fatalf("write outside the roots: %v, want an error result naming policy", r)
		}
		if _, err := os.Stat(outside); err == nil {
			t.Fatal("the refused write happened")
		}
		target := filepath.Join(root, "approved.txt")
		a, _ := json.Marshal(map[string]any{"path": target, "content": "approved by a human"})
		wait := e.background("exec", "m", "--", client, "http://airlock.internal/mcp/fs", "write_file", string(a))
		req := pendingIn(t, e, "fs/write_file")
		if req.Kind != "mcp" || !strings.Contains(req.Detail, "approved by a human") {
			t.Errorf("request %+v: want kind mcp showing the arguments", req)
		}
		if r := e.run("approve", req.ID); r.code != 0 {
			t.Fatalf("approve: %v", r)
		}
		if r := wait(); r.code != 0 {
			t.Fatalf("write after approval: %v", r)
		}
		if b, err := os.ReadFile(target); err != nil || string(b) != "approved by a human" {
			t.Fatalf("the approved write: %q, %v", b, err)
		}
		// mcp-bridge: a stdio client's initialize reaches the server through the proxy.
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`
		r := e.run("exec", "m", "--", "sh", "-c", "(echo '"+init+"'; sleep 3) | timeout 20 mcp-bridge fs | head -1")
		if r.code != 0 || !strings.Contains(r.stdout, `"serverInfo"`) {
			t.Fatalf("mcp-bridge initialize: %v", r)
		}
		var sawAllow, sawDeny bool
		for _, rec := range auditRecords(t, e, "m") {
			sawAllow = sawAllow || rec.Kind == "mcp" && rec.Decision == "allow" && rec.Subject == "fs/read_text_file"
			sawDeny = sawDeny || rec.Kind == "mcp" && rec.Decision == "deny" && rec.Subject == "fs/write_file"
		}
		if !sawAllow || !sawDeny {
			t.Errorf("mcp audit records: allow %v, deny %v", sawAllow, sawDeny)
		}
	})
}

// TestAPathSwappedAfterThePolicyCheckReachesNothing races the policy: the
// agent swaps a symlink in its workspace between a harmless directory and
// a path a `tool: "*"` rule denies, while it asks the real filesystem
// server, whose root holds both, to read and write through the link. Some
// calls are checked while the link points at the harmless directory and
// opened after it points elsewhere; the server's sandbox hides the denied
// path, so those find nothing. The judge is the host: no canary in any
// result, nothing written there. (airlock's own dirs cannot be inside a
// root: the server's sandbox refuses such a workspace and never starts.)
func TestAPathSwappedAfterThePolicyCheckReachesNothing(t *testing.T) {
	e := newEnv(t)
	R := filepath.Join(filepath.Dir(e.ws), "srv") // the server's root
	ws := filepath.Join(R, "ws")                  // the agent's workspace, inside it
	secret, plain := filepath.Join(R, "secret"), filepath.Join(R, "plain")
	for dir, text := range map[string]string{filepath.Join(ws, "ok"): "harmless", secret: "CANARY-denied-path", plain: "CANARY-read-deny-only"} {
		os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Dir(e.ws), 0o755)
	client, server, serverDir := mcpSetup(t, ws)
	cfg := map[string]any{"version": 1, "mcp_servers": map[string]any{"fs": map[string]any{
		"command": []string{"node", server, R},
		"roots":   []string{R},
		"ro":      []string{serverDir},
		"rules": []any{
			map[string]any{"tool": "read_text_file", "allow": map[string]any{"path": map[string]any{"path_within": "roots"}}},
			map[string]any{"tool": "write_file", "allow": map[string]any{"path": map[string]any{"path_within": "roots"}}},
			map[string]any{"tool": "*", "deny": map[string]any{"path": map[string]any{"path_within": []string{secret}}}},
			map[string]any{"tool": "read_text_file", "deny": map[string]any{"path": map[string]any{"path_within": []string{plain}}}},
		},
	}}}
	b, _ := json.Marshal(cfg)
	e.writeConfig(string(b))
	if r := e.run("run", "-d", "-q", "--name", "race", "--workspace", ws); r.code != 0 {
		t.Fatalf("run -d with an MCP server: %v", r)
	}
	defer e.run("kill", "--all")
	call := func(tool string, args map[string]any) result {
		a, _ := json.Marshal(args)
		return e.run("exec", "race", "--", client, "http://airlock.internal/mcp/fs", tool, string(a))
	}
	// Controls: through the link at the harmless directory a read works; the
	// refused paths named directly are refused by policy.
	os.Symlink("ok", filepath.Join(ws, "l"))
	if r := call("read_text_file", map[string]any{"path": filepath.Join(ws, "l", "f.txt")}); r.code != 0 || !strings.Contains(r.stdout, "harmless") {
		t.Fatalf("a read through the link: %v", r)
	}
	for _, dir := range []string{secret, plain} {
		if r := call("read_text_file", map[string]any{"path": filepath.Join(dir, "f.txt")}); r.code != 3 || !strings.Contains(r.stdout, "policy") {
			t.Fatalf("a direct read of %s: %v, want a policy refusal", dir, r)
		}
	}
	// The race, from inside: a swapper loop and calls through the link, each
	// path spelled differently (./ repeated) so the breaker does not stop it.
	const tries = 30
	script := `cd "$WS"
swap() { end=$(($(date +%s)+90)); while [ ! -e stop ] && [ "$(date +%s)" -lt $end ]; do ln -sfn "$1" l; ln -sfn ok l; done; }
for target in "$SECRET" "$PLAIN"; do
  rm -f stop; swap "$target" &
  i=0; dots=""
  while [ $i -lt $TRIES ]; do
    "$CLIENT" http://airlock.internal/mcp/fs read_text_file "{\"path\":\"$WS/${dots}l/f.txt\"}"
    if [ "$target" = "$SECRET" ]; then
      "$CLIENT" http://airlock.internal/mcp/fs write_file "{\"path\":\"$WS/${dots}l/new.txt\",\"content\":\"pwned\"}"
    fi
    dots="$dots./"; i=$((i+1))
  done
  touch stop; wait
done
ln -sfn ok l; rm -f stop`
	r := e.run("exec", "race", "--", "env", "WS="+ws, "SECRET="+secret, "PLAIN="+plain,
		"CLIENT="+client, fmt.Sprintf("TRIES=%d", tries), "sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("the race script: %v", r)
	}
	if strings.Contains(r.stdout, "CANARY-denied-path") {
		t.Errorf("a swapped path reached the denied directory through the server:\n%s", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(secret, "new.txt")); err == nil {
		t.Error("a swapped write landed in the denied directory")
	}
	if n := strings.Count(r.stdout, "harmless"); n == 0 {
		t.Errorf("no call through the link was allowed during the race (the race never ran):\n%s", r.stdout)
	} else {
		t.Logf("%d of %d reads were checked and served through the link", n, 2*tries)
	}
	// A deny rule on one tool is policy only (the path stays visible to the
	// server for the tools that may use it): the race may win there, which
	// is what a tool: "*" deny is for. Logged, not asserted.
	t.Logf("the one-tool deny (not hidden) was reached %d times", strings.Count(r.stdout, "CANARY-read-deny-only"))
}

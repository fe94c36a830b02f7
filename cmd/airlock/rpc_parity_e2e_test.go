//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/sandbox/client"
)

// TestRPCCloseWaitsForAPipelinedExec: create, exec and close written at
// once on one connection: the exec runs to its end (all its output, its
// exit code) before close ends the sandbox, and the audit log's other kinds
// (here lifecycle) arrive as events before close's reply; a request sent
// after close is refused, kind closed.
func TestRPCCloseWaitsForAPipelinedExec(t *testing.T) {
	e := newEnv(t)
	p := startRPC(t, e)
	p.send(`{"jsonrpc":"2.0","method":"create","params":{},"id":1}` + "\n" +
		`{"jsonrpc":"2.0","method":"exec","params":{"command":"for i in $(seq 1 50); do echo line$i; done; sleep 1; echo last; exit 7"},"id":2}` + "\n" +
		`{"jsonrpc":"2.0","method":"close","id":3}` + "\n" +
		`{"jsonrpc":"2.0","method":"exec","params":{"command":"echo after close"},"id":4}`)
	var order []string
	var exec2 map[string]any
	lifecycleStop := false
	deadline := time.After(60 * time.Second)
	var after map[string]any
	for len(order) < 3 {
		select {
		case m, ok := <-p.lines:
			if !ok {
				t.Fatalf("airlock rpc ended after %v", order)
			}
			if m["method"] == "event" {
				params, _ := m["params"].(map[string]any)
				rec, _ := params["record"].(map[string]any)
				if params["type"] == "lifecycle" && rec != nil && rec["op"] == "stop" {
					lifecycleStop = true
				}
				continue
			}
			if fmt.Sprint(m["id"]) == "4" {
				after = m
				continue
			}
			order = append(order, fmt.Sprint(m["id"]))
			if m["error"] != nil {
				t.Fatalf("request %v failed: %v", m["id"], m["error"])
			}
			if fmt.Sprint(m["id"]) == "2" {
				exec2 = m
			}
		case <-deadline:
			t.Fatalf("replies so far: %v", order)
		}
	}
	if strings.Join(order, ",") != "1,2,3" {
		t.Errorf("replies in order %v, want 1,2,3 (close last)", order)
	}
	res, _ := exec2["result"].(map[string]any)
	out, _ := base64.StdEncoding.DecodeString(fmt.Sprint(res["stdout"]))
	if code, _ := res["exit_code"].(float64); code != 7 || !strings.Contains(string(out), "line1\n") || !strings.HasSuffix(string(out), "line50\nlast\n") {
		t.Fatalf("the exec pipelined before close: exit %v, output %q", res["exit_code"], out)
	}
	if _, kind := errCode(after); kind != "closed" {
		t.Errorf("a request sent after close: %v, want kind closed", after)
	}
	if !lifecycleStop {
		t.Error("no lifecycle stop event before close's reply")
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("airlock rpc after close: %v", err)
	}
}

// curlThroughRPC creates a sandbox with params on p and curls url in it;
// it returns curl's exit code.
func curlThroughRPC(t *testing.T, p *rpcProc, params, url string) int {
	t.Helper()
	p.send(`{"jsonrpc":"2.0","method":"create","params":` + params + `,"id":1}`)
	if r := p.reply(1); r["error"] != nil {
		t.Fatalf("create: %v", r["error"])
	}
	p.send(`{"jsonrpc":"2.0","method":"exec","params":{"command":"curl -sS --max-time 20 ` + url + `"},"id":2}`)
	r := p.reply(2)
	res, _ := r["result"].(map[string]any)
	if res == nil {
		t.Fatalf("exec: %v", r)
	}
	code, _ := res["exit_code"].(float64)
	return int(code)
}

// TestRPCConfigFlagsAreCreateDefaults: airlock rpc --config FILE
// --allow-host H: the file (the config file format, its parser) and the
// flag are defaults under every create, so create {} reaches the host (the
// upstream's log shows it); the same create without them is refused (the
// log lacks it); a key create has no param for, or a bad default, is
// refused at start, one line, exit 125.
func TestRPCConfigFlagsAreCreateDefaults(t *testing.T) {
	u := testUpstream(t)
	e := newEnv(t)
	ip := strings.Split(u.addr, ":")[0]
	cfg := e.ws + "/rpc.yaml"
	os.WriteFile(cfg, []byte("network:\n  add_hosts: [\"example.com:"+ip+"\"]\n  upstream_ca: "+u.caFile+"\n"), 0o644)
	ok := fmt.Sprintf("/rpc-config-%d", time.Now().UnixNano())
	p := startRPC(t, e, "--config", cfg, "--allow-host", "example.com")
	if code := curlThroughRPC(t, p, `{}`, "https://example.com"+ok); code != 0 || !strings.Contains(readFile(t, u.logFile), ok) {
		t.Fatalf("with --config and --allow-host: curl exit %d, upstream log has %s: %v", code, ok, strings.Contains(readFile(t, u.logFile), ok))
	}
	no := ok + "-without"
	p = startRPC(t, e)
	if code := curlThroughRPC(t, p, `{}`, "https://example.com"+no); code == 0 || strings.Contains(readFile(t, u.logFile), no) {
		t.Fatalf("without the defaults the request went out (exit %d)", code)
	}
	bad := e.ws + "/bad.yaml"
	for name, tc := range map[string]struct {
		file string
		args []string
		want string
	}{
		"a key create has no param for": {"mcp_servers: {}\n", nil, "mcp_servers is not a create setting"},
		"a misspelt key":                {"network:\n  allow_hostz: [x]\n", nil, "did you mean allow_hosts"},
		"an image native cannot run":    {"", []string{"--image", "ubuntu"}, `image "ubuntu"`},
	} {
		args := []string{"rpc"}
		if tc.file != "" {
			os.WriteFile(bad, []byte(tc.file), 0o644)
			args = append(args, "--config", bad)
		}
		c := e.cmd(append(args, tc.args...)...)
		out, err := c.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v, output %q; want exit 125 saying %q", name, err, out, tc.want)
		}
	}
}

// TestRPCGoClientManager: a session with no sandbox of its own lists,
// gets and kills one another session made; the killed one's next exec
// fails closed, and the state dir no longer shows it running.
func TestRPCGoClientManager(t *testing.T) {
	e := newEnv(t)
	sb := newRPCClient(t, e, &sandbox.Config{})
	m, err := client.Manage(client.Options{Binary: airlockBin, Env: e.environ()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	running := func() bool {
		l, err := m.List(ctx)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, x := range l {
			if x["id"] == sb.ID() {
				st, _ := x["status"].(map[string]any)
				return st["state"] == "running"
			}
		}
		return false
	}
	if !running() {
		t.Fatalf("list does not show %s running", sb.ID())
	}
	if g, err := m.Get(ctx, sb.ID()); err != nil || g["id"] != sb.ID() {
		t.Fatalf("get %s: %v %v", sb.ID(), g, err)
	}
	if _, err := m.Get(ctx, "no-such-sandbox"); !errors.Is(err, &sandbox.Error{Kind: sandbox.KindNotFound}) {
		t.Errorf("get of no such sandbox: %v, want kind not_found", err)
	}
	if err := m.Kill(ctx, ""); err == nil || !strings.Contains(err.Error(), "id is required") {
		t.Errorf("kill without an id: %v", err)
	}
	if err := m.Kill(ctx, sb.ID()); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if _, err := sb.Exec("true"); !errors.Is(err, sandbox.ErrClosed) {
		t.Errorf("exec in the killed sandbox: %v, want closed", err)
	}
	if running() {
		t.Error("the killed sandbox is still listed running")
	}
}

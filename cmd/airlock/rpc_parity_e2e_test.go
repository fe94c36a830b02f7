package main

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRPCCloseWaitsForAPipelinedExec: create, exec and close written at
// once on one connection: the exec runs to its end (all its output, its
// exit code) before close ends the sandbox, and the audit log's other kinds
// (here lifecycle) arrive as events before close's reply.
func TestRPCCloseWaitsForAPipelinedExec(t *testing.T) {
	e := newEnv(t)
	p := startRPC(t, e)
	p.send(`{"jsonrpc":"2.0","method":"create","params":{},"id":1}` + "\n" +
		`{"jsonrpc":"2.0","method":"exec","params":{"command":"for i in $(seq 1 50); do echo line$i; done; sleep 1; echo last; exit 7"},"id":2}` + "\n" +
		`{"jsonrpc":"2.0","method":"close","id":3}`)
	var order []string
	var exec2 map[string]any
	lifecycleStop := false
	deadline := time.After(60 * time.Second)
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
	if !lifecycleStop {
		t.Error("no lifecycle stop event before close's reply")
	}
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("airlock rpc after close: %v", err)
	}
}

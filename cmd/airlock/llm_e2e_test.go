//go:build linux

package main

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-dev/airlock/internal/llmusage"
)

// llmAddr is this test's fake Messages API (port 443 needs root).
const llmAddr = "127.0.0.26:443"

// fakeMessages serves POST /v1/messages as a stream reporting 30 input, 5
// cache-read and 25 output tokens (message_delta's count is cumulative).
func fakeMessages(t *testing.T) (caFile string, calls *atomic.Int32) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("binding the fake LLM API's port 443 needs root")
	}
	calls = new(atomic.Int32)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"model":"claude-haiku-4-5","usage":{"input_tokens":30,"cache_read_input_tokens":5,"output_tokens":1}}}`,
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":10}}`,
			`event: message_delta` + "\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":25}}`,
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}`,
		} {
			fmt.Fprintf(w, "%s\n\n", ev)
			w.(http.Flusher).Flush()
		}
	})
	ln, err := net.Listen("tcp", llmAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "llm-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return caFile, calls
}

// TestLLMBudgetStopsTheSecondRequest: curl inside the sandbox calls a
// Messages API twice with --budget-tokens 50; the first streamed answer (60
// tokens) arrives whole, the second request is refused by the gateway in the
// API's error shape without reaching the server, and airlock get shows the
// totals.
func TestLLMBudgetStopsTheSecondRequest(t *testing.T) {
	caFile, calls := fakeMessages(t)
	for _, mode := range networkModes() {
		t.Run(mode, func(t *testing.T) {
			calls.Store(0)
			e := newEnv(t)
			name := "llm-" + strings.ReplaceAll(mode, "_", "-")
			r := e.run("run", "-q", "--name", name, "--network-mode", mode, "--add-host", "llm.example.com:"+strings.Split(llmAddr, ":")[0], "--upstream-ca", caFile,
				"--allow-host", "llm.example.com", "--budget-tokens", "50", "--", "sh", "-c", `
				curl -sS -N https://llm.example.com/v1/messages -H 'content-type: application/json' -d '{"model":"claude-haiku-4-5","stream":true}'
				echo
				curl -sS -w ' status %{http_code}\n' https://llm.example.com/v1/messages -H 'content-type: application/json' -d '{"model":"claude-haiku-4-5"}'`)
			if r.code != 0 || !strings.Contains(r.stdout, `"type":"message_stop"`) {
				t.Fatalf("the first answer should arrive whole: %v", r)
			}
			if !strings.Contains(r.stdout, `"billing_error"`) || !strings.Contains(r.stdout, "budget of 50 tokens is spent (used 60)") || !strings.Contains(r.stdout, "status 402") {
				t.Errorf("the second request should be refused with 402 and say why: %v", r)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("the fake API was called %d times, want 1", n)
			}
			var got struct {
				LLM *llmusage.Totals `json:"llm"`
			}
			g := e.run("get", name)
			if err := json.Unmarshal([]byte(g.stdout), &got); err != nil || got.LLM == nil {
				t.Fatalf("airlock get %s: %v %v", name, err, g)
			}
			want := llmusage.Usage{Input: 30, Output: 25, CacheRead: 5}
			if l := got.LLM; l.Requests != 1 || l.Tokens != 60 || l.Usage != want || l.USD <= 0 || l.Refused != 1 || l.BudgetTokens != 50 {
				t.Errorf("airlock get shows %+v, want 1 request of %+v (60 tokens, priced), 1 refused, budget 50", *l, want)
			}
		})
	}
}

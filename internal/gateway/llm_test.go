package gateway

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/llmusage"
)

// anthropicStream answers like the Messages API streaming: usage in
// message_start and a cumulative output count in message_delta, flushed
// event by event.
func anthropicStream(w http.ResponseWriter, in, out int) {
	w.Header().Set("Content-Type", "text/event-stream")
	events := []string{
		fmt.Sprintf(`{"type":"message_start","message":{"model":"claude-haiku-4-5","usage":{"input_tokens":%d,"cache_read_input_tokens":5,"output_tokens":1}}}`, in),
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}`,
		fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":%d}}`, out),
		`{"type":"message_stop"}`,
	}
	for _, e := range events {
		var typ struct{ Type string }
		json.Unmarshal([]byte(e), &typ)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ.Type, e)
		w.(http.Flusher).Flush()
	}
}

// TestLLMRequestsAreRefusedOnceTheBudgetIsSpent: the first streamed answer
// goes through whole even though it overspends; the next request is refused
// with 402 in the Messages API's error shape and never reaches the server;
// both are audited as kind llm with the totals.
func TestLLMRequestsAreRefusedOnceTheBudgetIsSpent(t *testing.T) {
	var calls atomic.Int32
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("Accept-Encoding") != "gzip" && r.Header.Get("Accept-Encoding") != "" {
			t.Errorf("Accept-Encoding %q reached the server: compressed answers could not be read", r.Header.Get("Accept-Encoding"))
		}
		anthropicStream(w, 30, 25)
	}))
	m := llmusage.NewMeter(llmusage.Budget{Tokens: 50})
	f := newFixture(t, options{policy: allowExample(), meter: m, static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	post := func() (*http.Response, string) {
		req, _ := http.NewRequest("POST", "https://example.com/v1/messages", strings.NewReader(`{"model":"claude-haiku-4-5","stream":true}`))
		req.Header.Set("Accept-Encoding", "br, gzip")
		resp, err := f.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post()
	if resp.StatusCode != 200 || !strings.Contains(body, "message_stop") {
		t.Fatalf("first request: %d %q: a request in flight must finish", resp.StatusCode, body)
	}
	tot := m.Totals()
	if tot.Tokens != 60 || tot.Usage != (llmusage.Usage{Input: 30, Output: 25, CacheRead: 5}) || tot.USD <= 0 {
		t.Fatalf("totals after the first answer: %+v", tot)
	}
	resp, body = post()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || resp.StatusCode != 402 || e.Type != "error" || e.Error.Type != "billing_error" ||
		!strings.Contains(e.Error.Message, "airlock: the sandbox's budget of 50 tokens is spent (used 60)") {
		t.Fatalf("second request: %d %s", resp.StatusCode, body)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the server was called %d times, want 1", n)
	}
	ok := waitRecord(t, f, func(r audit.Record) bool { return r.Kind == audit.KindLLM && r.Decision == audit.Allow })
	if ok.Subject != "claude-haiku-4-5" || ok.Extra["tokens"] != "60" || ok.Extra["output"] != "25" || ok.Extra["total_tokens"] != "60" || ok.Extra["usd"] == "" {
		t.Errorf("llm record: %+v", ok)
	}
	no := waitRecord(t, f, func(r audit.Record) bool { return r.Kind == audit.KindLLM && r.Decision == audit.Deny })
	if no.Status != 402 || !strings.Contains(no.Reason, "budget of 50 tokens") {
		t.Errorf("refusal record: %+v", no)
	}
}

// TestNonLLMPathsAreNotMetered: only recognised paths are read or refused.
func TestNonLLMPathsAreNotMetered(t *testing.T) {
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { anthropicStream(w, 100, 100) }))
	m := llmusage.NewMeter(llmusage.Budget{Tokens: 1})
	f := newFixture(t, options{policy: allowExample(), meter: m, static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	for i := 0; i < 2; i++ {
		resp, err := f.client.Post("https://example.com/v1/other", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if tot := m.Totals(); tot.Requests != 0 || tot.Tokens != 0 {
		t.Errorf("totals %+v, want nothing counted", tot)
	}
}

// TestResponsesOverAWebSocketAreMeteredAndCutAtTheBudget: Codex's
// WebSocket: each response.completed is counted; once the budget is spent
// the connection is closed after that message and a new upgrade is refused.
func TestResponsesOverAWebSocketAreMeteredAndCutAtTheBudget(t *testing.T) {
	up := wsUpstream(t, true, func(r *http.Request, c net.Conn, br *bufio.Reader) {
		for {
			op, _, _, err := readWSMessage(br)
			if err != nil || op == 8 {
				return
			}
			writeWSFrame(c, true, 1, []byte(`{"type":"response.created","response":{"model":"gpt-5-codex","usage":null}}`), false)
			done := `{"type":"response.completed","response":{"model":"gpt-5-codex","usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":10},"output_tokens":20}}}`
			writeWSFrame(c, false, 1, []byte(done[:30]), false)
			writeWSFrame(c, true, 0, []byte(done[30:]), false)
		}
	})
	m := llmusage.NewMeter(llmusage.Budget{Tokens: 100})
	f := newFixture(t, options{policy: allowExample(), meter: m, static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	tc, br := wsThrough(t, f, "/v1/responses", "Sec-WebSocket-Extensions: permessage-deflate\r\n")
	for turn := 1; turn <= 2; turn++ {
		writeWSFrame(tc, true, 1, []byte(`{"type":"response.create"}`), true)
		for i := 0; i < 2; i++ {
			if op, msg, _, err := readWSMessage(br); err != nil || op != 1 {
				t.Fatalf("turn %d message %d: %d %q %v", turn, i, op, msg, err)
			}
		}
	}
	// 120 of 100 tokens: the relay closes the connection.
	if op, _, ctl, err := readWSMessage(br); err != nil || op != 8 || !strings.Contains(string(ctl[0].payload), "budget of 100 tokens is spent (used 120)") {
		t.Fatalf("after the budget: %d %+v %v, want a close frame saying why", op, ctl, err)
	}
	if tot := m.Totals(); tot.Requests != 2 || tot.Usage != (llmusage.Usage{Input: 60, Output: 40, CacheRead: 20}) {
		t.Errorf("totals %+v", tot)
	}
	// A new upgrade (Codex reconnecting) is refused, as is its HTTPS fallback.
	conn, cbr := connectThrough(t, f.proxy, "example.com:443")
	defer conn.Close()
	tc2 := tls.Client(bufConn{conn, cbr}, &tls.Config{ServerName: "example.com", RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
	fmt.Fprint(tc2, "GET /v1/responses HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(tc2), nil); err != nil || resp.StatusCode != 402 {
		t.Errorf("a new upgrade after the budget: %v %v, want 402", resp, err)
	}
	resp, err := f.client.Post("https://example.com/v1/responses", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 402 || !strings.Contains(string(b), `"code":"insufficient_quota"`) {
		t.Errorf("a request after the budget: %d %s", resp.StatusCode, b)
	}
}

// TestASizedJSONAnswerIsCountedBeforeTheNextRequest: a non-streamed answer
// with a Content-Length is counted by its last byte, so the request that
// follows it at once is already refused.
func TestASizedJSONAnswerIsCountedBeforeTheNextRequest(t *testing.T) {
	body := `{"model":"gpt-5-mini","choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":70,"completion_tokens":40}}`
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		io.WriteString(w, body)
	}))
	m := llmusage.NewMeter(llmusage.Budget{Tokens: 100})
	f := newFixture(t, options{policy: allowExample(), meter: m, static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	for i, want := range []int{200, 402} {
		resp, err := f.client.Post("https://example.com/v1/chat/completions", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d %s, want %d", i+1, resp.StatusCode, b, want)
		}
	}
	if tot := m.Totals(); tot.Tokens != 110 || tot.Refused != 1 {
		t.Errorf("totals %+v", tot)
	}
}

// TestAResponseCreateOnAnOpenWebSocketIsRefusedOnceTheBudgetIsSpent: the
// budget runs out through another request while Codex's WebSocket is open;
// its next message is not passed on, and the sandbox is told why.
func TestAResponseCreateOnAnOpenWebSocketIsRefusedOnceTheBudgetIsSpent(t *testing.T) {
	got := make(chan string, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, r *http.Request) { anthropicStream(w, 30, 25) })
	ws := wsUpstream(t, false, func(r *http.Request, c net.Conn, br *bufio.Reader) {
		for {
			op, msg, _, err := readWSMessage(br)
			if err != nil || op == 8 {
				close(got)
				return
			}
			got <- string(msg)
		}
	})
	up := upstreamTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/responses" {
			ws.Config.Handler.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	m := llmusage.NewMeter(llmusage.Budget{Tokens: 50})
	f := newFixture(t, options{policy: allowExample(), meter: m, static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	tc, br := wsThrough(t, f, "/v1/responses", "")
	writeWSFrame(tc, true, 1, []byte(`{"type":"response.create","n":1}`), true)
	if msg := <-got; msg != `{"type":"response.create","n":1}` {
		t.Fatalf("first message arrived as %q", msg)
	}
	resp, err := f.client.Post("https://example.com/v1/messages", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	writeWSFrame(tc, true, 1, []byte(`{"type":"response.create","n":2}`), true)
	op, _, ctl, err := readWSMessage(br)
	if err != nil || op != 8 || !strings.Contains(string(ctl[0].payload), "budget of 50 tokens is spent (used 60)") {
		t.Fatalf("after the budget: %d %+v %v, want a close frame saying why", op, ctl, err)
	}
	if msg, ok := <-got; ok {
		t.Errorf("the server got %q after the budget was spent", msg)
	}
	if tot := m.Totals(); tot.Refused != 1 {
		t.Errorf("totals %+v, want one refusal", tot)
	}
}

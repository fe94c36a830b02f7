package fakellm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// openaiClient reaches s under the name api.openai.com, trusting only
// its CA.
func openaiClient(t *testing.T, s *Server) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "api.openai.com"},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, s.Addr)
		},
	}}
}

func startOpenAI(t *testing.T, script []Step) *Server {
	t.Helper()
	s, err := Start("127.0.0.1:0", t.TempDir(), script, Usage{Input: 100, Output: 20, CacheRead: 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openaiPost(t *testing.T, c *http.Client, path, key string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "https://api.openai.com"+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type openaiEvent struct {
	name string
	data map[string]any
	raw  string
}

func openaiReadSSE(t *testing.T, r io.Reader) []openaiEvent {
	t.Helper()
	var evs []openaiEvent
	var cur openaiEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.raw = strings.TrimPrefix(line, "data: ")
			if cur.raw != "[DONE]" {
				if err := json.Unmarshal([]byte(cur.raw), &cur.data); err != nil {
					t.Fatalf("SSE data %q: %v", cur.raw, err)
				}
			}
		case line == "":
			if cur.raw != "" {
				evs = append(evs, cur)
			}
			cur = openaiEvent{}
		}
	}
	return evs
}

var responsesScript = []Step{
	{Text: "Writing it.", Tool: "shell", Args: map[string]any{"command": []any{"touch", "x"}}},
	{Tool: "exec", Args: map[string]any{"input": "await tools.exec_command({cmd: \"ls\"})"}},
	{Text: "All done."},
}

var functionTools = []any{map[string]any{"type": "function", "name": "shell", "parameters": map[string]any{"type": "object"}}}

func TestResponsesStreamsTheScriptedStep(t *testing.T) {
	s := startOpenAI(t, responsesScript)
	c := openaiClient(t, s)
	for _, tc := range []struct {
		name     string
		body     map[string]any
		wantStep int
		check    func(t *testing.T, items []map[string]any)
	}{
		{
			name:     "a first request calls the first step's function with its arguments",
			body:     map[string]any{"model": "gpt-5", "stream": true, "input": "make a file", "tools": functionTools},
			wantStep: 0,
			check: func(t *testing.T, items []map[string]any) {
				if len(items) != 2 || items[0]["type"] != "message" || items[1]["type"] != "function_call" || items[1]["name"] != "shell" {
					t.Fatalf("items %v: want a message and a shell call", items)
				}
				var args map[string]any
				json.Unmarshal([]byte(items[1]["arguments"].(string)), &args)
				if cmd, _ := args["command"].([]any); len(cmd) != 2 || cmd[0] != "touch" {
					t.Errorf("arguments %v", args)
				}
			},
		},
		{
			name: "one function result moves to the second step, a custom tool offered in a namespace of additional_tools",
			body: map[string]any{"model": "gpt-5", "stream": true, "input": []any{
				map[string]any{"type": "additional_tools", "tools": []any{map[string]any{"type": "namespace", "name": "functions", "tools": []any{
					map[string]any{"type": "custom", "name": "exec"},
				}}}},
				map[string]any{"type": "message", "role": "user", "content": "go"},
				map[string]any{"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
				map[string]any{"type": "function_call_output", "call_id": "c1", "output": "ok"},
			}},
			wantStep: 1,
			check: func(t *testing.T, items []map[string]any) {
				if len(items) != 1 || items[0]["type"] != "custom_tool_call" || items[0]["name"] != "exec" || !strings.Contains(items[0]["input"].(string), "exec_command") {
					t.Fatalf("items %v: want a custom exec call with the script's input", items)
				}
			},
		},
		{
			name: "two tool results of any kind reach the final text",
			body: map[string]any{"model": "gpt-5", "stream": true, "tools": functionTools, "input": []any{
				map[string]any{"type": "function_call_output", "call_id": "c1", "output": "ok"},
				map[string]any{"type": "custom_tool_call_output", "call_id": "c2", "output": "ok"},
			}},
			wantStep: 2,
			check: func(t *testing.T, items []map[string]any) {
				if len(items) != 1 || items[0]["type"] != "message" {
					t.Fatalf("items %v: want one message", items)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(s.Requests())
			resp := openaiPost(t, c, "/v1/responses", "sk-real", tc.body)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			evs := openaiReadSSE(t, resp.Body)
			if evs[0].name != "response.created" || evs[len(evs)-1].name != "response.completed" {
				t.Fatalf("events from %s to %s", evs[0].name, evs[len(evs)-1].name)
			}
			var text, args strings.Builder
			var done []map[string]any
			for i, e := range evs {
				if e.data["type"] != e.name || int(e.data["sequence_number"].(float64)) != i {
					t.Errorf("event %d %s: type %v, sequence %v", i, e.name, e.data["type"], e.data["sequence_number"])
				}
				switch e.name {
				case "response.output_text.delta":
					text.WriteString(e.data["delta"].(string))
				case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
					args.WriteString(e.data["delta"].(string))
				case "response.output_item.done":
					done = append(done, e.data["item"].(map[string]any))
				}
			}
			final := evs[len(evs)-1].data["response"].(map[string]any)
			var items []map[string]any
			for _, it := range final["output"].([]any) {
				items = append(items, it.(map[string]any))
			}
			if len(items) != len(done) {
				t.Errorf("completed output has %d items, output_item.done %d", len(items), len(done))
			}
			tc.check(t, items)
			for _, it := range items {
				switch it["type"] {
				case "message":
					if got := it["content"].([]any)[0].(map[string]any)["text"]; got != text.String() {
						t.Errorf("deltas %q, message %q", text.String(), got)
					}
				case "function_call":
					if it["arguments"] != args.String() {
						t.Errorf("argument deltas %q, call %q", args.String(), it["arguments"])
					}
				case "custom_tool_call":
					if it["input"] != args.String() {
						t.Errorf("input deltas %q, call %q", args.String(), it["input"])
					}
				}
			}
			u := final["usage"].(map[string]any)
			if u["input_tokens"].(float64) != 130 || u["output_tokens"].(float64) != 20 ||
				u["input_tokens_details"].(map[string]any)["cached_tokens"].(float64) != 30 {
				t.Errorf("usage %v: want input 130 (30 cached), output 20", u)
			}
			reqs := s.Requests()[before:]
			if len(reqs) != 1 || reqs[0].API != "openai-responses" || reqs[0].Step != tc.wantStep || reqs[0].Credential != "sk-real" || !reqs[0].Stream || reqs[0].Model != "gpt-5" {
				t.Errorf("recorded %+v, want step %d with the bearer key", reqs, tc.wantStep)
			}
			if reqs[0].Usage != (Usage{Input: 100, Output: 20, CacheRead: 30}) {
				t.Errorf("recorded usage %+v", reqs[0].Usage)
			}
		})
	}
}

func TestResponsesAnswersWithoutStreaming(t *testing.T) {
	s := startOpenAI(t, responsesScript)
	resp := openaiPost(t, openaiClient(t, s), "/v1/responses", "sk-x", map[string]any{"model": "gpt-5", "input": "hi", "tools": functionTools})
	var r struct {
		Status string           `json:"status"`
		Output []map[string]any `json:"output"`
		Usage  map[string]any   `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "completed" || len(r.Output) != 2 || r.Output[1]["name"] != "shell" || r.Usage["output_tokens"].(float64) != 20 {
		t.Errorf("response %+v", r)
	}
	if q := s.Requests(); q[0].Stream {
		t.Errorf("recorded as streamed: %+v", q[0])
	}
}

func TestSideRequestsWithoutToolsGetTextAndDoNotCountAsSteps(t *testing.T) {
	s := startOpenAI(t, responsesScript)
	resp := openaiPost(t, openaiClient(t, s), "/v1/responses", "sk-x", map[string]any{"model": "gpt-5-nano", "stream": true, "input": "a title for: make a file"})
	evs := openaiReadSSE(t, resp.Body)
	for _, e := range evs {
		if strings.Contains(e.name, "function_call") {
			t.Fatalf("a request without tools got %s", e.name)
		}
	}
	if q := s.Requests(); q[0].Step != -1 {
		t.Errorf("recorded step %d, want -1", q[0].Step)
	}
}

func TestAWebSocketUpgradeIsRefusedWith426ByDefault(t *testing.T) {
	s := startOpenAI(t, responsesScript)
	req, _ := http.NewRequest("GET", "https://api.openai.com/v1/responses", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Authorization", "Bearer sk-ws")
	resp, err := openaiClient(t, s).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("status %d, want 426", resp.StatusCode)
	}
	if q := s.Requests(); len(q) != 1 || q[0].API != "openai-responses-websocket" || q[0].Credential != "sk-ws" {
		t.Errorf("recorded %+v", q)
	}
}

// wsDial opens a WebSocket to s's /v1/responses as Codex does.
func wsDial(t *testing.T, s *Server, key string) (net.Conn, *bufio.Reader) {
	t.Helper()
	pem, _ := os.ReadFile(s.CAFile)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	conn, err := tls.Dial("tcp", s.Addr, &tls.Config{RootCAs: pool, ServerName: "api.openai.com", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /v1/responses HTTP/1.1\r\nHost: api.openai.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer "+key+"\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("upgrade: %v %+v", err, resp)
	}
	return conn, br
}

// wsSend writes a masked client frame.
func wsSend(t *testing.T, c net.Conn, op byte, payload []byte) {
	t.Helper()
	mask := [4]byte{1, 2, 3, 4}
	h := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		h = append(h, 0x80|byte(n))
	case n <= 0xffff:
		h = append(h, 0x80|126, byte(n>>8), byte(n))
	default:
		t.Fatal("too big for the test")
	}
	h = append(h, mask[:]...)
	for i, b := range payload {
		h = append(h, b^mask[i%4])
	}
	if _, err := c.Write(h); err != nil {
		t.Fatal(err)
	}
}

// wsRecv reads one server frame.
func wsRecv(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatal(err)
	}
	if h[1]&0x80 != 0 {
		t.Fatal("a masked server frame")
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var b [2]byte
		io.ReadFull(br, b[:])
		n = int(b[0])<<8 | int(b[1])
	} else if n == 127 {
		var b [8]byte
		io.ReadFull(br, b[:])
		n = 0
		for _, x := range b {
			n = n<<8 | int(x)
		}
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(br, p); err != nil {
		t.Fatal(err)
	}
	return h[0] & 0x0f, p
}

// wsTurn sends a response.create and returns the completed response.
func wsTurn(t *testing.T, c net.Conn, br *bufio.Reader, turn map[string]any) map[string]any {
	t.Helper()
	turn["type"] = "response.create"
	b, _ := json.Marshal(turn)
	wsSend(t, c, 0x1, b)
	for {
		op, p := wsRecv(t, br)
		if op != 0x1 {
			t.Fatalf("opcode %#x", op)
		}
		var ev map[string]any
		if err := json.Unmarshal(p, &ev); err != nil {
			t.Fatal(err)
		}
		if ev["type"] == "response.completed" {
			return ev["response"].(map[string]any)
		}
		if ev["type"] == "error" {
			t.Fatalf("error event %s", p)
		}
	}
}

func TestResponsesOverAWebSocketWhenServed(t *testing.T) {
	s := startOpenAI(t, responsesScript)
	s.ServeResponsesWebSocket(true)
	c, br := wsDial(t, s, "sk-ws")
	tools := []any{map[string]any{"type": "additional_tools", "tools": []any{
		map[string]any{"type": "function", "name": "shell"}, map[string]any{"type": "custom", "name": "exec"},
	}}}
	first := wsTurn(t, c, br, map[string]any{"model": "gpt-5", "input": append(tools, map[string]any{"type": "message", "role": "user", "content": "go"})})
	out := first["output"].([]any)
	call := out[len(out)-1].(map[string]any)
	if call["type"] != "function_call" || call["name"] != "shell" {
		t.Fatalf("first turn: %v", out)
	}
	t.Run("a ping is answered with a pong", func(t *testing.T) {
		wsSend(t, c, 0x9, []byte("hi"))
		if op, p := wsRecv(t, br); op != 0xA || string(p) != "hi" {
			t.Errorf("got %#x %q", op, p)
		}
	})
	t.Run("a turn continuing the first with only its new input is the next step, with the first turn's tools", func(t *testing.T) {
		second := wsTurn(t, c, br, map[string]any{"model": "gpt-5", "previous_response_id": first["id"], "input": []any{
			map[string]any{"type": "function_call_output", "call_id": call["call_id"], "output": "ok"},
		}})
		it := second["output"].([]any)[0].(map[string]any)
		if it["type"] != "custom_tool_call" || it["name"] != "exec" {
			t.Errorf("second turn: %v", second["output"])
		}
		third := wsTurn(t, c, br, map[string]any{"model": "gpt-5", "previous_response_id": second["id"], "input": []any{
			map[string]any{"type": "custom_tool_call_output", "call_id": it["call_id"], "output": "ok"},
		}})
		if m := third["output"].([]any)[0].(map[string]any); m["type"] != "message" {
			t.Errorf("third turn: %v", third["output"])
		}
	})
	t.Run("every turn is recorded with the upgrade's credential and its step", func(t *testing.T) {
		var steps []int
		for _, q := range s.Requests() {
			if q.API != "openai-responses-websocket" || q.Credential != "sk-ws" {
				t.Errorf("recorded %+v", q)
			}
			steps = append(steps, q.Step)
		}
		if len(steps) != 3 || steps[0] != 0 || steps[1] != 1 || steps[2] != 2 {
			t.Errorf("steps %v, want 0 1 2", steps)
		}
	})
	t.Run("a close is answered with a close", func(t *testing.T) {
		wsSend(t, c, 0x8, nil)
		if op, _ := wsRecv(t, br); op != 0x8 {
			t.Errorf("got %#x", op)
		}
	})
}

func TestChatCompletionsStreamToolCallsAndUsage(t *testing.T) {
	s := startOpenAI(t, []Step{
		{Tool: "bash", Args: map[string]any{"command": "echo hi > f", "description": "write"}},
		{Text: "Finished."},
	})
	c := openaiClient(t, s)
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "bash"}}}
	for _, tc := range []struct {
		name         string
		messages     []any
		includeUsage bool
		wantTool     bool
		wantStep     int
	}{
		{"a first request gets the tool call assembled from deltas and a usage chunk", []any{map[string]any{"role": "user", "content": "go"}}, true, true, 0},
		{"a tool message moves to the final text, without usage unless asked", []any{
			map[string]any{"role": "user", "content": "go"},
			map[string]any{"role": "assistant", "tool_calls": []any{}},
			map[string]any{"role": "tool", "tool_call_id": "c", "content": "ok"},
		}, false, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"model": "gpt-4.1", "stream": true, "messages": tc.messages, "tools": tools}
			if tc.includeUsage {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			before := len(s.Requests())
			evs := openaiReadSSE(t, openaiPost(t, c, "/v1/chat/completions", "sk-chat", body).Body)
			if evs[len(evs)-1].raw != "[DONE]" {
				t.Fatalf("last event %q, want [DONE]", evs[len(evs)-1].raw)
			}
			var name, args, text, finish string
			var usage map[string]any
			for _, e := range evs[:len(evs)-1] {
				if u, ok := e.data["usage"].(map[string]any); ok {
					usage = u
				}
				for _, ch := range e.data["choices"].([]any) {
					ch := ch.(map[string]any)
					if f, ok := ch["finish_reason"].(string); ok {
						finish = f
					}
					d := ch["delta"].(map[string]any)
					if c, ok := d["content"].(string); ok {
						text += c
					}
					calls, _ := d["tool_calls"].([]any)
					for _, tcall := range calls {
						fn := tcall.(map[string]any)["function"].(map[string]any)
						if n, ok := fn["name"].(string); ok {
							name = n
						}
						args += fn["arguments"].(string)
					}
				}
			}
			if tc.wantTool {
				var a map[string]any
				if name != "bash" || finish != "tool_calls" || json.Unmarshal([]byte(args), &a) != nil || a["command"] != "echo hi > f" {
					t.Errorf("call %q(%s), finish %q", name, args, finish)
				}
			} else if text != "Finished." || finish != "stop" {
				t.Errorf("text %q, finish %q", text, finish)
			}
			if tc.includeUsage != (usage != nil) {
				t.Errorf("usage chunk %v, asked %v", usage, tc.includeUsage)
			}
			if usage != nil && (usage["prompt_tokens"].(float64) != 130 || usage["completion_tokens"].(float64) != 20) {
				t.Errorf("usage %v", usage)
			}
			q := s.Requests()[before:]
			if len(q) != 1 || q[0].API != "openai-chat" || q[0].Step != tc.wantStep || q[0].Credential != "sk-chat" {
				t.Errorf("recorded %+v", q)
			}
		})
	}
}

func TestModelsAreListed(t *testing.T) {
	s := startOpenAI(t, nil)
	req, _ := http.NewRequest("GET", "https://api.openai.com/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-m")
	resp, err := openaiClient(t, s).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&r)
	if len(r.Data) != len(OpenAIModels) || r.Data[0].ID != OpenAIModels[0] {
		t.Errorf("models %+v", r.Data)
	}
	if q := s.Requests(); q[0].Credential != "sk-m" {
		t.Errorf("recorded %+v", q)
	}
}

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
	"reflect"
	"strings"
	"testing"
	"time"
)

var anthropicTestScript = []Step{
	{Text: "I'll write it.", Tool: "Write", Args: map[string]any{"file_path": "/w/a.txt", "content": "héllo wörld, a longer content to split into several deltas\n"}},
	{Tool: "Bash", Args: map[string]any{"command": "curl -sS https://denied.example.com"}},
	{Text: "All done."},
}

var anthropicTestUsage = Usage{Input: 100, Output: 20, CacheRead: 30, CacheWrite: 40}

// startAnthropic serves the fake on a free loopback port and returns it
// with a client that trusts its CA and reaches it as api.anthropic.com.
func startAnthropic(t *testing.T) (*Server, *http.Client) {
	t.Helper()
	s, err := Start("127.0.0.1:0", t.TempDir(), anthropicTestScript, anthropicTestUsage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no certificate in", s.CAFile)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, s.Addr)
		},
	}}
	return s, c
}

// history is a Messages request body whose history holds n tool calls
// and their results; tools says whether it offers tools.
func history(n int, tools, stream bool) []byte {
	msgs := []any{map[string]any{"role": "user", "content": "write a.txt"}}
	for i := range n {
		id := "toolu_" + string(rune('a'+i))
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "Bash", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": id, "content": "ok"},
				map[string]any{"type": "text", "text": "a reminder, not a result"},
			}})
	}
	req := map[string]any{"model": "claude-test-1", "max_tokens": 1024, "stream": stream, "messages": msgs}
	if tools {
		req["tools"] = []any{map[string]any{"name": "Write", "input_schema": map[string]any{"type": "object"}}}
	}
	b, _ := json.Marshal(req)
	return b
}

func post(t *testing.T, c *http.Client, path string, body []byte, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", "https://api.anthropic.com"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type sseEvent struct {
	Name string
	Data map[string]any
}

// readSSE parses an event stream; each data line must be JSON and name
// the same type as its event line.
func readSSE(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var evs []sseEvent
	var name string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var d map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
				t.Fatalf("data line %q: %v", line, err)
			}
			if d["type"] != name {
				t.Fatalf("event %q carries data of type %v", name, d["type"])
			}
			evs = append(evs, sseEvent{name, d})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestAnthropicStreamsAToolCallAsTheAPIDoes(t *testing.T) {
	s, c := startAnthropic(t)
	resp := post(t, c, "/v1/messages?beta=true", history(0, true, true), "X-Api-Key", "sk-ant-api03-the-key")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("answered over %s, want HTTP/2 (offered by ALPN)", resp.Proto)
	}
	evs := readSSE(t, resp.Body)

	var names []string
	for _, e := range evs {
		if len(names) == 0 || names[len(names)-1] != e.Name {
			names = append(names, e.Name)
		}
	}
	want := []string{"message_start", "ping",
		"content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("events %v, want %v", names, want)
	}

	msg := evs[0].Data["message"].(map[string]any)
	if msg["model"] != "claude-test-1" || msg["role"] != "assistant" {
		t.Errorf("message_start %v", msg)
	}
	u := msg["usage"].(map[string]any)
	if u["input_tokens"] != 100.0 || u["cache_read_input_tokens"] != 30.0 || u["cache_creation_input_tokens"] != 40.0 {
		t.Errorf("message_start usage %v, want input 100, cache read 30, cache write 40", u)
	}

	// Reassemble the blocks from their deltas.
	var text, toolJSON strings.Builder
	var tool map[string]any
	deltas := 0
	for _, e := range evs {
		switch e.Name {
		case "content_block_start":
			if b := e.Data["content_block"].(map[string]any); b["type"] == "tool_use" {
				tool = b
			}
		case "content_block_delta":
			deltas++
			d := e.Data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				text.WriteString(d["text"].(string))
			case "input_json_delta":
				toolJSON.WriteString(d["partial_json"].(string))
			default:
				t.Errorf("delta type %v", d["type"])
			}
		}
	}
	if text.String() != "I'll write it." {
		t.Errorf("text %q", text.String())
	}
	if tool["name"] != "Write" || !strings.HasPrefix(tool["id"].(string), "toolu_") {
		t.Errorf("tool_use block %v", tool)
	}
	var input map[string]any
	if err := json.Unmarshal([]byte(toolJSON.String()), &input); err != nil {
		t.Fatalf("tool input %q: %v", toolJSON.String(), err)
	}
	if !reflect.DeepEqual(input, anthropicTestScript[0].Args) {
		t.Errorf("tool input %v, want %v", input, anthropicTestScript[0].Args)
	}
	if deltas < 4 {
		t.Errorf("%d deltas: the input should arrive in pieces", deltas)
	}

	md := evs[len(evs)-2].Data
	if md["delta"].(map[string]any)["stop_reason"] != "tool_use" || md["usage"].(map[string]any)["output_tokens"] != 20.0 {
		t.Errorf("message_delta %v, want stop_reason tool_use and output_tokens 20", md)
	}

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests recorded", len(reqs))
	}
	r := reqs[0]
	if r.API != "anthropic" || r.Path != "/v1/messages" || r.Credential != "sk-ant-api03-the-key" ||
		r.Model != "claude-test-1" || r.Step != 0 || !r.Stream || r.Usage != anthropicTestUsage {
		t.Errorf("recorded %+v", r)
	}
}

func TestAnthropicAnswersWithoutStreaming(t *testing.T) {
	s, c := startAnthropic(t)
	resp := post(t, c, "/v1/messages", history(1, true, false), "Authorization", "Bearer sk-ant-oat01-token")
	var m struct {
		StopReason string `json:"stop_reason"`
		Content    []struct {
			Type, Text, ID, Name string
			Input                map[string]any
		}
		Usage map[string]int64
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || len(m.Content) != 1 || m.Content[0].Type != "tool_use" || m.Content[0].Name != "Bash" ||
		!reflect.DeepEqual(m.Content[0].Input, anthropicTestScript[1].Args) || m.StopReason != "tool_use" {
		t.Fatalf("status %d, answer %+v", resp.StatusCode, m)
	}
	want := map[string]int64{"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 40}
	if !reflect.DeepEqual(m.Usage, want) {
		t.Errorf("usage %v, want %v", m.Usage, want)
	}
	if r := s.Requests()[0]; r.Credential != "sk-ant-oat01-token" || r.Step != 1 || r.Stream {
		t.Errorf("recorded %+v", r)
	}
}

func TestAnthropicStepIsTheCountOfToolResults(t *testing.T) {
	for name, tc := range map[string]struct {
		results  int
		tools    bool
		wantStep int
		wantText string
		wantStop string
	}{
		"a fresh conversation gets the first step":            {0, true, 0, "I'll write it.", "tool_use"},
		"one tool result moves it to the second":              {1, true, 1, "", "tool_use"},
		"the last step is a final text":                       {2, true, 2, "All done.", "end_turn"},
		"past the script's end a closing text is said":        {5, true, 3, "Done.", "end_turn"},
		"a side request without tools never moves the script": {2, false, -1, anthropicSideText, "end_turn"},
	} {
		t.Run(name, func(t *testing.T) {
			s, c := startAnthropic(t)
			resp := post(t, c, "/v1/messages", history(tc.results, tc.tools, false), "X-Api-Key", "k")
			var m struct {
				StopReason string `json:"stop_reason"`
				Content    []struct{ Type, Text string }
			}
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
				t.Fatal(err)
			}
			if m.StopReason != tc.wantStop || m.Content[0].Text != tc.wantText {
				t.Errorf("answer %+v, want stop %s and first text %q", m, tc.wantStop, tc.wantText)
			}
			if got := s.Requests()[0].Step; got != tc.wantStep {
				t.Errorf("step %d, want %d", got, tc.wantStep)
			}
		})
	}
}

func TestAnthropicCountsTokensAndServesClaudeCodesOtherCalls(t *testing.T) {
	s, c := startAnthropic(t)
	resp := post(t, c, "/v1/messages/count_tokens", history(0, true, false), "X-Api-Key", "k1")
	var ct map[string]int64
	if err := json.NewDecoder(resp.Body).Decode(&ct); err != nil || ct["input_tokens"] != 100 {
		t.Errorf("count_tokens: %v, %v", ct, err)
	}
	for path, want := range map[string]int{
		"/api/hello":                     200,
		"/api/claude_code/settings":      404,
		"/api/claude_code/policy_limits": 200,
	} {
		req, _ := http.NewRequest("GET", "https://api.anthropic.com"+path, nil)
		req.Header.Set("X-Api-Key", "k2")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp = post(t, c, "/v1/organizations/x", []byte("{}"))
	if resp.StatusCode != 404 {
		t.Errorf("unknown path: %d", resp.StatusCode)
	}
	resp = post(t, c, "/v1/messages", []byte("{not json"), "X-Api-Key", "k3")
	if resp.StatusCode != 400 {
		t.Errorf("a bad body: %d, want 400", resp.StatusCode)
	}

	var unknown []string
	for _, r := range s.Requests() {
		if r.API == "unknown" {
			unknown = append(unknown, r.Path)
		} else if r.Step != -1 || r.Usage != (Usage{}) || (r.Credential != "k1" && r.Credential != "k2") {
			t.Errorf("side call recorded as %+v: want step -1, no usage, its key", r)
		}
	}
	if !reflect.DeepEqual(unknown, []string{"/v1/organizations/x"}) {
		t.Errorf("unknown paths %v", unknown)
	}
	if tot := s.Totals(); tot != (Usage{}) {
		t.Errorf("totals %+v: no model answer was given", tot)
	}
}

package fakellm

import (
	"bufio"
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
)

// geminiScript writes a file, runs a shell command, then answers.
var geminiScript = []Step{
	{Text: "Writing it.", Tool: "write_file", Args: map[string]any{"file_path": "/w/a.txt", "content": "hi"}},
	{Tool: "run_shell_command", Args: map[string]any{"command": "curl -sS https://denied.example.com"}},
	{Text: "All done."},
}

var geminiUsage = Usage{Input: 100, Output: 40, CacheRead: 30}

// startGemini serves the fake on a free loopback port and returns a real
// HTTPS client that reaches it under Google's name, trusting only its CA.
func startGemini(t *testing.T) (*Server, *http.Client) {
	t.Helper()
	s, err := Start("127.0.0.1:0", t.TempDir(), geminiScript, geminiUsage)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("CA file holds no certificate")
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, s.Addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return s, &http.Client{Transport: tr}
}

const geminiBase = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro"

func geminiPost(t *testing.T, c *http.Client, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("x-goog-api-key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// sseEvents reads a Gemini SSE stream's data payloads.
func sseEvents(t *testing.T, r io.Reader) []geminiAnswer {
	t.Helper()
	var out []geminiAnswer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(strings.TrimRight(sc.Text(), "\r"), "data: ")
		if !ok {
			continue
		}
		var a geminiAnswer
		if err := json.Unmarshal([]byte(data), &a); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		out = append(out, a)
	}
	return out
}

type geminiAnswer struct {
	Candidates []struct {
		Content struct {
			Role  string `json:"role"`
			Parts []struct {
				Text         string `json:"text"`
				FunctionCall *struct {
					Name string         `json:"name"`
					Args map[string]any `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount        int64 `json:"promptTokenCount"`
		CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
		CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
		ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
		TotalTokenCount         int64 `json:"totalTokenCount"`
	} `json:"usageMetadata"`
}

// said joins the text and names the calls of a streamed answer.
func said(as []geminiAnswer) (text string, calls []string) {
	for _, a := range as {
		for _, c := range a.Candidates {
			for _, p := range c.Content.Parts {
				text += p.Text
				if p.FunctionCall != nil {
					calls = append(calls, p.FunctionCall.Name)
				}
			}
		}
	}
	return text, calls
}

const geminiTools = `"tools":[{"functionDeclarations":[{"name":"write_file"},{"name":"run_shell_command"}]}]`

func TestGeminiStreamFollowsTheScript(t *testing.T) {
	user := `{"role":"user","parts":[{"text":"go"}]}`
	call := func(id string) string {
		return `{"role":"model","parts":[{"functionCall":{"id":"` + id + `","name":"write_file","args":{}}}]}`
	}
	result := func(id string) string {
		return `{"role":"user","parts":[{"functionResponse":{"id":"` + id + `","name":"write_file","response":{"output":"ok"}}}]}`
	}
	tests := map[string]struct {
		body      string
		wantStep  int
		wantText  string
		wantCalls []string
	}{
		"a new conversation gets the first step's text and call": {
			body:     `{"contents":[` + user + `],` + geminiTools + `}`,
			wantStep: 0, wantText: "Writing it.", wantCalls: []string{"write_file"},
		},
		"each tool result moves the script one step": {
			body:     `{"contents":[` + user + `,` + call("a") + `,` + result("a") + `],` + geminiTools + `}`,
			wantStep: 1, wantCalls: []string{"run_shell_command"},
		},
		"a result repeated under the same id (a resumed session) counts once": {
			body:     `{"contents":[` + user + `,` + call("a") + `,` + result("a") + `,` + result("a") + `],` + geminiTools + `}`,
			wantStep: 1, wantCalls: []string{"run_shell_command"},
		},
		"results without ids count each": {
			body:     `{"contents":[` + user + `,` + call("") + `,` + result("") + `,` + call("") + `,` + result("") + `],` + geminiTools + `}`,
			wantStep: 2, wantText: "All done.",
		},
		"past the script's end the model says it is done": {
			body:     `{"contents":[` + user + `,` + result("a") + `,` + result("b") + `,` + result("c") + `],` + geminiTools + `}`,
			wantStep: 3, wantText: "Done.",
		},
		"a request declaring no functions is a side request answered with text": {
			body:     `{"contents":[` + user + `,` + result("a") + `]}`,
			wantStep: -1, wantText: "Done.",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, c := startGemini(t)
			resp := geminiPost(t, c, geminiBase+":streamGenerateContent?alt=sse", "AIza-real", tc.body)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			text, calls := said(sseEvents(t, resp.Body))
			if text != tc.wantText || strings.Join(calls, ",") != strings.Join(tc.wantCalls, ",") {
				t.Errorf("answer = %q, calls %v; want %q, calls %v", text, calls, tc.wantText, tc.wantCalls)
			}
			rs := s.Requests()
			if len(rs) != 1 {
				t.Fatalf("recorded %d requests, want 1", len(rs))
			}
			r := rs[0]
			if r.API != "gemini" || r.Step != tc.wantStep || !r.Stream || r.Model != "gemini-2.5-pro" || r.Credential != "AIza-real" {
				t.Errorf("recorded %+v; want gemini step %d, streamed, model gemini-2.5-pro, key AIza-real", r, tc.wantStep)
			}
		})
	}
}

func TestGeminiCallArgumentsArrive(t *testing.T) {
	_, c := startGemini(t)
	resp := geminiPost(t, c, geminiBase+":streamGenerateContent?alt=sse", "k", `{"contents":[{"role":"user","parts":[{"text":"go"}]}],`+geminiTools+`}`)
	for _, a := range sseEvents(t, resp.Body) {
		for _, p := range a.Candidates[0].Content.Parts {
			if p.FunctionCall != nil {
				if p.FunctionCall.Args["file_path"] != "/w/a.txt" || p.FunctionCall.Args["content"] != "hi" {
					t.Errorf("args = %v, want the script's", p.FunctionCall.Args)
				}
				return
			}
		}
	}
	t.Fatal("no functionCall in the answer")
}

func TestGeminiCredentialIsRecordedFromHeaderQueryOrBearer(t *testing.T) {
	body := `{"contents":[{"role":"user","parts":[{"text":"go"}]}],` + geminiTools + `}`
	tests := map[string]struct {
		url    string
		header [2]string
		want   string
	}{
		"the x-goog-api-key header":          {url: geminiBase + ":generateContent", header: [2]string{"x-goog-api-key", "AIza-header"}, want: "AIza-header"},
		"the key query parameter":            {url: geminiBase + ":streamGenerateContent?alt=sse&key=AIza-query", want: "AIza-query"},
		"an OAuth bearer token":              {url: geminiBase + ":generateContent", header: [2]string{"Authorization", "Bearer ya29.token"}, want: "ya29.token"},
		"no credential is recorded as empty": {url: geminiBase + ":generateContent", want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, c := startGemini(t)
			req, _ := http.NewRequest("POST", tc.url, strings.NewReader(body))
			if tc.header[0] != "" {
				req.Header.Set(tc.header[0], tc.header[1])
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if rs := s.Requests(); len(rs) != 1 || rs[0].Credential != tc.want {
				t.Errorf("recorded %+v, want credential %q", rs, tc.want)
			}
		})
	}
}

func TestGeminiUsageIsReportedInTheLastEvent(t *testing.T) {
	s, c := startGemini(t)
	// Step 2 is a text answer, which is streamed in two events.
	body := `{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"x","response":{}}},{"functionResponse":{"name":"x","response":{}}}]}],` + geminiTools + `}`
	resp := geminiPost(t, c, geminiBase+":streamGenerateContent?alt=sse", "k", body)
	evs := sseEvents(t, resp.Body)
	if len(evs) < 2 {
		t.Fatalf("%d events, want a text split over at least 2", len(evs))
	}
	for _, e := range evs[:len(evs)-1] {
		if e.UsageMetadata != nil {
			t.Errorf("an early event carries usage %+v", *e.UsageMetadata)
		}
	}
	u := evs[len(evs)-1].UsageMetadata
	if u == nil {
		t.Fatal("the last event carries no usageMetadata")
	}
	if text, _ := said(evs); text != "All done." {
		t.Errorf("joined text = %q, want %q", text, "All done.")
	}
	if evs[len(evs)-1].Candidates[0].FinishReason != "STOP" {
		t.Errorf("last event finishReason = %q, want STOP", evs[len(evs)-1].Candidates[0].FinishReason)
	}
	// What a gateway reading usageMetadata would count must equal what
	// the server recorded.
	got := Usage{
		Input:     u.PromptTokenCount - u.CachedContentTokenCount,
		CacheRead: u.CachedContentTokenCount,
		Output:    u.CandidatesTokenCount + u.ThoughtsTokenCount,
	}
	if got != s.Totals() || got != geminiUsage {
		t.Errorf("usageMetadata reads as %+v; server totals %+v; configured %+v", got, s.Totals(), geminiUsage)
	}
	if u.ThoughtsTokenCount == 0 || u.TotalTokenCount != u.PromptTokenCount+u.CandidatesTokenCount+u.ThoughtsTokenCount {
		t.Errorf("usageMetadata %+v: want thoughts reported and a total that adds up", *u)
	}
}

func TestGeminiAnswersWithoutSSE(t *testing.T) {
	body := `{"contents":[{"role":"user","parts":[{"text":"go"}]}],` + geminiTools + `}`
	tests := map[string]struct {
		method string
		array  bool
	}{
		"generateContent answers one JSON object":                {method: ":generateContent"},
		"streamGenerateContent without alt=sse answers an array": {method: ":streamGenerateContent", array: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, c := startGemini(t)
			resp := geminiPost(t, c, geminiBase+tc.method, "k", body)
			b, _ := io.ReadAll(resp.Body)
			var as []geminiAnswer
			if tc.array {
				if err := json.Unmarshal(b, &as); err != nil {
					t.Fatalf("%s: %v", b, err)
				}
			} else {
				var a geminiAnswer
				if err := json.Unmarshal(b, &a); err != nil {
					t.Fatalf("%s: %v", b, err)
				}
				as = []geminiAnswer{a}
			}
			if _, calls := said(as); len(calls) != 1 || calls[0] != "write_file" {
				t.Errorf("calls = %v, want [write_file]", calls)
			}
			if r := s.Requests()[0]; r.Stream != tc.array {
				t.Errorf("recorded Stream = %v, want %v", r.Stream, tc.array)
			}
		})
	}
}

func TestGeminiJSONRequestGetsAValueOfItsSchema(t *testing.T) {
	// Gemini CLI 0.61.0's model router asks for this before each turn.
	s, c := startGemini(t)
	body := `{"contents":[{"role":"user","parts":[{"text":"go"}]}],"generationConfig":{"responseMimeType":"application/json",
		"responseJsonSchema":{"type":"OBJECT","properties":{"complexity_reasoning":{"type":"STRING"},"complexity_score":{"type":"INTEGER"},
		"next_speaker":{"type":"string","enum":["user","model"]}},"required":["complexity_reasoning","complexity_score"]}}}`
	resp := geminiPost(t, c, geminiBase+":generateContent", "k", body)
	var a geminiAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	text, _ := said([]geminiAnswer{a})
	var v struct {
		Reasoning string `json:"complexity_reasoning"`
		Score     int    `json:"complexity_score"`
		Next      string `json:"next_speaker"`
	}
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("answer %q is not JSON: %v", text, err)
	}
	if v.Reasoning == "" || v.Score < 1 || v.Next != "user" {
		t.Errorf("answer %+v: want a reason, a score of at least 1 and the enum's first value", v)
	}
	if r := s.Requests()[0]; r.Step != -1 {
		t.Errorf("recorded step %d, want -1 (side request)", r.Step)
	}
}

func TestGeminiOtherEndpoints(t *testing.T) {
	tests := map[string]struct {
		method, url, body string
		status            int
		want              string
	}{
		"countTokens counts":                 {"POST", geminiBase + ":countTokens", `{"contents":[]}`, 200, `"totalTokens"`},
		"the model list names models":        {"GET", "https://generativelanguage.googleapis.com/v1beta/models", "", 200, `"models/gemini-2.5-pro"`},
		"one model is described":             {"GET", geminiBase, "", 200, `"inputTokenLimit"`},
		"an unknown method is not found":     {"POST", geminiBase + ":embedEverything", `{}`, 404, `"NOT_FOUND"`},
		"a body that is not JSON is refused": {"POST", geminiBase + ":generateContent", `{`, 400, `"INVALID_ARGUMENT"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, c := startGemini(t)
			req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
			req.Header.Set("x-goog-api-key", "k")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Errorf("%s %s = %d %s; want %d containing %s", tc.method, tc.url, resp.StatusCode, b, tc.status, tc.want)
			}
			if rs := s.Requests(); len(rs) != 1 || rs[0].API != "gemini" || rs[0].Credential != "k" {
				t.Errorf("recorded %+v, want one gemini request with key k", rs)
			}
		})
	}
}

package fakellm

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"
)

// The Anthropic Messages API as Claude Code uses it:
//
//	POST /v1/messages               streamed (SSE) or not, per "stream"
//	POST /v1/messages/count_tokens  {"input_tokens": N}
//	GET  /api/hello                 200: the onboarding's connectivity check
//	GET  /api/claude_code/settings  404: no remote managed settings
//	GET  /api/claude_code/policy_limits  {"restrictions": {}}: no limits
//
// A request that offers no tools is one of the agent's side requests
// (session titles, quota checks, summaries): it gets a short text answer
// and is recorded with Step -1, so it never moves the script along.
// Anything else under the API's host falls through to the server's
// catch-all, which records the path as "unknown" and answers 404.

// anthropicMaxBody bounds a request body: Claude Code sends its whole
// history, system prompt and tool schemas with every turn (a few hundred
// kB in practice).
const anthropicMaxBody = 32 << 20

// anthropicSideText answers a request without tools.
const anthropicSideText = "Fake session"

// routeAnthropic serves the Anthropic API's endpoints on mux.
func (s *Server) routeAnthropic(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/messages", s.anthropicMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.anthropicCountTokens)
	// Claude Code's own calls beside the model (they carry the key too,
	// even with nonessential traffic off).
	mux.HandleFunc("GET /api/hello", s.anthropicStatic(http.StatusOK, `{"message":"hello"}`))
	mux.HandleFunc("GET /api/claude_code/settings", s.anthropicStatic(http.StatusNotFound,
		`{"type":"error","error":{"type":"not_found_error","message":"fakellm: no managed settings"}}`))
	mux.HandleFunc("GET /api/claude_code/policy_limits", s.anthropicStatic(http.StatusOK, `{"restrictions":{}}`))
}

// anthropicStatic answers a fixed JSON body, recorded as a side request.
func (s *Server) anthropicStatic(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.record(Request{API: "anthropic", Path: r.URL.Path, Credential: Credential(r), Step: -1})
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// anthropicRequest is the part of a Messages request the fake reads.
type anthropicRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"` // a string or a list of blocks
	} `json:"messages"`
	Tools []json.RawMessage `json:"tools"`
}

// toolResults counts the tool_result blocks in the request's history.
func (r *anthropicRequest) toolResults() int {
	n := 0
	for _, m := range r.Messages {
		var blocks []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue // a plain string: no blocks
		}
		for _, b := range blocks {
			if b.Type == "tool_result" {
				n++
			}
		}
	}
	return n
}

// anthropicError answers in the API's error shape.
func anthropicError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type":  "error",
		"error": map[string]string{"type": kind, "message": "fakellm: " + msg},
	})
}

// anthropicRead decodes a request body of at most anthropicMaxBody bytes.
func anthropicRead(w http.ResponseWriter, r *http.Request) (*anthropicRequest, bool) {
	var req anthropicRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, anthropicMaxBody)).Decode(&req); err != nil {
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "bad request body: "+err.Error())
		return nil, false
	}
	return &req, true
}

func (s *Server) anthropicCountTokens(w http.ResponseWriter, r *http.Request) {
	req, ok := anthropicRead(w, r)
	if !ok {
		return
	}
	s.record(Request{API: "anthropic", Path: r.URL.Path, Credential: Credential(r), Model: req.Model, Step: -1})
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]int64{"input_tokens": s.Usage.Input})
}

// anthropicBlock is one content block of an answer.
type anthropicBlock struct {
	Type  string         `json:"type"` // "text" or "tool_use"
	Text  string         `json:"text,omitempty"`
	ID    string         `json:"id,omitempty"`
	Name  string         `json:"name,omitempty"`
	Input map[string]any `json:"input,omitempty"`
}

func (s *Server) anthropicMessages(w http.ResponseWriter, r *http.Request) {
	req, ok := anthropicRead(w, r)
	if !ok {
		return
	}
	rec := Request{API: "anthropic", Path: r.URL.Path, Credential: Credential(r),
		Model: req.Model, Step: -1, Stream: req.Stream, Usage: s.Usage}
	var blocks []anthropicBlock
	stop := "end_turn"
	if len(req.Tools) == 0 {
		blocks = []anthropicBlock{{Type: "text", Text: anthropicSideText}}
	} else {
		n := req.toolResults()
		st, inScript := s.step(n)
		if inScript {
			rec.Step = n
		} else {
			rec.Step = len(s.Script)
		}
		if st.Text != "" {
			blocks = append(blocks, anthropicBlock{Type: "text", Text: st.Text})
		}
		if st.Tool != "" {
			args := st.Args
			if args == nil {
				args = map[string]any{}
			}
			blocks = append(blocks, anthropicBlock{Type: "tool_use", ID: "toolu_" + anthropicID(), Name: st.Tool, Input: args})
			stop = "tool_use"
		}
		if len(blocks) == 0 {
			blocks = []anthropicBlock{{Type: "text", Text: "Done."}}
		}
	}
	s.record(rec)
	model := req.Model
	if model == "" {
		model = "claude-fake"
	}
	id := "msg_" + anthropicID()
	w.Header().Set("Request-Id", "req_"+anthropicID())
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		for i := range blocks {
			if blocks[i].Type == "tool_use" && blocks[i].Input == nil {
				blocks[i].Input = map[string]any{}
			}
		}
		json.NewEncoder(w).Encode(map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil,
			"usage": s.anthropicUsage(s.Usage.Output),
		})
		return
	}
	s.anthropicStream(w, id, model, blocks, stop)
}

// anthropicUsage is the usage object with output tokens out.
func (s *Server) anthropicUsage(out int64) map[string]int64 {
	return map[string]int64{
		"input_tokens":                s.Usage.Input,
		"cache_creation_input_tokens": s.Usage.CacheWrite,
		"cache_read_input_tokens":     s.Usage.CacheRead,
		"output_tokens":               out,
	}
}

// anthropicStream answers as the API streams: message_start (input and
// cache tokens, output so far), each block as content_block_start, deltas
// and content_block_stop (a tool's input as input_json_delta pieces),
// message_delta with the stop reason and the final, cumulative output
// tokens, then message_stop. A reader that sums output tokens across
// message_start and message_delta counts the first one twice, as it would
// against the real API.
func (s *Server) anthropicStream(w http.ResponseWriter, id, model string, blocks []anthropicBlock, stop string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		rc.Flush()
	}
	first := min(s.Usage.Output, 1)
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": s.anthropicUsage(first),
	}})
	send("ping", map[string]string{"type": "ping"})
	for i, b := range blocks {
		switch b.Type {
		case "text":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]string{"type": "text", "text": ""}})
			for _, piece := range anthropicSplit(b.Text, 16) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]string{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			send("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}})
			in, _ := json.Marshal(b.Input)
			for _, piece := range anthropicSplit(string(in), 24) {
				send("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]string{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	send("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int64{"output_tokens": s.Usage.Output}})
	send("message_stop", map[string]string{"type": "message_stop"})
}

// anthropicSplit cuts s into pieces of at most n bytes, never inside a
// UTF-8 sequence, so a stream carries several deltas.
func anthropicSplit(s string, n int) []string {
	var out []string
	for len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 {
			cut = n
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" || len(out) == 0 {
		out = append(out, s)
	}
	return out
}

// anthropicID is a random id in the API's style.
func anthropicID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

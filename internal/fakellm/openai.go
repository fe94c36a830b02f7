package fakellm

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// openaiMaxBody bounds a request body (agents send their whole history and
// tool list with every request; a few MiB at most in tests).
const openaiMaxBody = 32 << 20

// routeOpenAI serves the OpenAI API's endpoints on mux: the Responses API
// (Codex; OpenCode's openai provider), Chat Completions (OpenAI-compatible
// providers) and the model list.
//
// A Step calls a function tool with Args as its JSON arguments; when the
// request offers Step.Tool as a "custom" (free-form) tool, as Codex offers
// exec and apply_patch, Args["input"] (a string) is the call's input. A
// request that offers no tool at all (a title, a summary) is answered with
// text and does not count as a step.
//
// A WebSocket upgrade of /v1/responses (Codex tries it before SSE) is
// answered 426 Upgrade Required unless ServeResponsesWebSocket turned the
// WebSocket on: Codex 0.169 takes 426 as "no WebSocket here" and falls
// back to SSE within milliseconds, without retrying (a TLS failure or a
// 5xx costs it ~6.5 s of retries instead), so tests of the agents stay
// fast whatever the gateway does with upgrades.
func (s *Server) routeOpenAI(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/responses", s.openAIResponses)
	mux.HandleFunc("GET /v1/responses", s.openAIResponses) // a WebSocket upgrade
	mux.HandleFunc("POST /v1/chat/completions", s.openAIChat)
	// Host-bound: Gemini serves GET /v1/models too.
	mux.HandleFunc("GET api.openai.com/v1/models", s.openAIModels)
}

// OpenAIModels are the models GET /v1/models lists.
var OpenAIModels = []string{"gpt-5.5", "gpt-5.4", "gpt-5-codex", "gpt-4.1", "gpt-4o"}

func (s *Server) openAIModels(w http.ResponseWriter, r *http.Request) {
	s.record(Request{API: "openai-models", Path: r.URL.Path, Credential: Credential(r), Step: -1})
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	var ms []model
	for _, m := range OpenAIModels {
		ms = append(ms, model{ID: m, Object: "model", Created: 1700000000, OwnedBy: "openai"})
	}
	openaiJSON(w, map[string]any{"object": "list", "data": ms})
}

// responsesRequest is the part of a Responses API request the fake reads.
type responsesRequest struct {
	Model  string            `json:"model"`
	Stream bool              `json:"stream"`
	Input  json.RawMessage   `json:"input"` // a string or a list of items
	Tools  []json.RawMessage `json:"tools"`
}

// toolResults counts the tool results in a Responses input: every
// "*_call_output" item (function_call_output, custom_tool_call_output,
// local_shell_call_output, ...).
func (q responsesRequest) toolResults() int {
	var items []struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(q.Input, &items) != nil {
		return 0 // a plain string prompt
	}
	n := 0
	for _, it := range items {
		if strings.HasSuffix(it.Type, "_call_output") {
			n++
		}
	}
	return n
}

// offersTools reports whether the request offers the model any tool.
func (q responsesRequest) offersTools() bool {
	if len(q.Tools) > 0 {
		return true
	}
	var items []struct {
		Type  string            `json:"type"`
		Tools []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(q.Input, &items) != nil {
		return false
	}
	for _, it := range items {
		if it.Type == "additional_tools" && len(it.Tools) > 0 {
			return true
		}
	}
	return false
}

// sideText is the answer to a request that offers no tools: the step's
// text, or a short title.
func sideText(st Step) string {
	if st.Tool == "" && st.Text != "" {
		return st.Text
	}
	return "Scripted session"
}

// customTool reports whether the request offers name as a "custom"
// (free-form input) tool rather than a function, as Codex offers exec and
// apply_patch. Tools are in the request's tools list or, from Codex 0.16x,
// in "additional_tools" input items, possibly inside namespaces.
func (q responsesRequest) customTool(name string) bool {
	type tool struct {
		Type  string `json:"type"`
		Name  string `json:"name"`
		Tools []json.RawMessage
	}
	var find func(ts []json.RawMessage, depth int) (bool, bool)
	find = func(ts []json.RawMessage, depth int) (found, custom bool) {
		for _, raw := range ts {
			var t tool
			if json.Unmarshal(raw, &t) != nil {
				continue
			}
			if t.Type == "namespace" && depth < 4 {
				if f, c := find(t.Tools, depth+1); f {
					return f, c
				}
				continue
			}
			if t.Name == name {
				return true, t.Type == "custom"
			}
		}
		return false, false
	}
	if f, c := find(q.Tools, 0); f {
		return c
	}
	var items []tool
	if json.Unmarshal(q.Input, &items) != nil {
		return false
	}
	for _, it := range items {
		if it.Type == "additional_tools" {
			if f, c := find(it.Tools, 0); f {
				return c
			}
		}
	}
	return false
}

func openaiID(prefix string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// responsesUsage is s.Usage as the Responses API reports it: input_tokens
// includes the cached ones (OpenAI counts cache reads inside the input;
// there is no cache-write count).
func (s *Server) responsesUsage() map[string]any {
	return map[string]any{
		"input_tokens":          s.Usage.Input + s.Usage.CacheRead,
		"input_tokens_details":  map[string]any{"cached_tokens": s.Usage.CacheRead},
		"output_tokens":         s.Usage.Output,
		"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":          s.Usage.Input + s.Usage.CacheRead + s.Usage.Output,
	}
}

// reportedUsage is what a Request records for an OpenAI answer.
func (s *Server) reportedUsage() Usage {
	return Usage{Input: s.Usage.Input, Output: s.Usage.Output, CacheRead: s.Usage.CacheRead}
}

func (s *Server) openAIResponses(w http.ResponseWriter, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		if s.responsesWebSocketOn() {
			s.responsesWebSocket(w, r)
			return
		}
		s.record(Request{API: "openai-responses-websocket", Path: r.URL.Path, Credential: Credential(r), Step: -1})
		http.Error(w, `{"error":{"message":"fakellm: WebSocket not supported; use HTTP","type":"invalid_request_error"}}`, http.StatusUpgradeRequired)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	var q responsesRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, openaiMaxBody)).Decode(&q); err != nil {
		http.Error(w, `{"error":{"message":"fakellm: bad JSON"}}`, http.StatusBadRequest)
		return
	}
	rep := s.responsesReply(q, nil, Request{API: "openai-responses", Path: r.URL.Path, Credential: Credential(r), Stream: q.Stream})
	if !q.Stream {
		openaiJSON(w, rep.response("completed"))
		return
	}
	sse := openaiNewSSE(w)
	rep.stream(func(typ string, ev map[string]any) { sse.event(typ, ev) })
}

// responsesReply is one answer of the Responses API.
type responsesReply struct {
	s       *Server
	id      string
	model   string
	text    string
	items   []map[string]any
	results int              // tool results in the history answered (for a chain)
	tools   responsesRequest // the request whose tools were offered
}

// responsesReply chooses and records the answer to q. A WebSocket turn
// that continues an earlier one (previous_response_id) sends only its new
// input: its history holds prior's tool results too, and the tools prior
// was offered.
func (s *Server) responsesReply(q responsesRequest, prior *responsesReply, rec Request) *responsesReply {
	n := q.toolResults()
	tools := q
	if prior != nil {
		n += prior.results
		if !q.offersTools() {
			tools = prior.tools // the tools came with the chain's first turn
		}
	}
	st, scripted := s.step(n)
	if !tools.offersTools() {
		// A side request (a title, a summary): it cannot call a tool.
		st, scripted = Step{Text: sideText(st)}, false
	}
	rec.Model, rec.Step, rec.Usage = q.Model, n, s.reportedUsage()
	if !scripted {
		rec.Step = -1
	}
	s.record(rec)

	rep := &responsesReply{s: s, id: openaiID("resp_"), model: q.Model, text: st.Text, items: []map[string]any{}, results: n, tools: tools}
	if st.Text != "" {
		rep.items = append(rep.items, map[string]any{
			"type": "message", "id": openaiID("msg_"), "status": "completed", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": st.Text, "annotations": []any{}}},
		})
	}
	if st.Tool != "" {
		if tools.customTool(st.Tool) {
			input, _ := st.Args["input"].(string)
			rep.items = append(rep.items, map[string]any{
				"type": "custom_tool_call", "id": openaiID("ctc_"), "status": "completed",
				"call_id": openaiID("call_"), "name": st.Tool, "input": input,
			})
		} else {
			args, _ := json.Marshal(st.Args)
			if st.Args == nil {
				args = []byte("{}")
			}
			rep.items = append(rep.items, map[string]any{
				"type": "function_call", "id": openaiID("fc_"), "status": "completed",
				"call_id": openaiID("call_"), "name": st.Tool, "arguments": string(args),
			})
		}
	}
	return rep
}

// response is the response object in a state.
func (rep *responsesReply) response(status string) map[string]any {
	output := rep.items
	if status != "completed" {
		output = []map[string]any{}
	}
	m := map[string]any{
		"id": rep.id, "object": "response", "created_at": time.Now().Unix(),
		"status": status, "model": rep.model, "output": output,
		"parallel_tool_calls": false, "tool_choice": "auto", "tools": []any{},
		"usage": nil,
	}
	if status == "completed" {
		m["usage"] = rep.s.responsesUsage()
	}
	return m
}

// stream sends the answer as the streaming events, each to send(type, event).
func (rep *responsesReply) stream(send func(typ string, event map[string]any)) {
	seq := 0
	emit := func(typ string, m map[string]any) {
		m["type"] = typ
		m["sequence_number"] = seq
		seq++
		send(typ, m)
	}
	emit("response.created", map[string]any{"response": rep.response("in_progress")})
	emit("response.in_progress", map[string]any{"response": rep.response("in_progress")})
	for i, it := range rep.items {
		added := map[string]any{}
		for k, v := range it {
			added[k] = v
		}
		added["status"] = "in_progress"
		switch it["type"] {
		case "message":
			added["content"] = []any{}
			emit("response.output_item.added", map[string]any{"output_index": i, "item": added})
			part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
			emit("response.content_part.added", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "part": part})
			for _, chunk := range openaiChunks(rep.text, 16) {
				emit("response.output_text.delta", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "delta": chunk, "logprobs": []any{}})
			}
			emit("response.output_text.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "text": rep.text, "logprobs": []any{}})
			part = map[string]any{"type": "output_text", "text": rep.text, "annotations": []any{}}
			emit("response.content_part.done", map[string]any{"item_id": it["id"], "output_index": i, "content_index": 0, "part": part})
		case "function_call":
			added["arguments"] = ""
			emit("response.output_item.added", map[string]any{"output_index": i, "item": added})
			args := it["arguments"].(string)
			for _, chunk := range openaiChunks(args, 32) {
				emit("response.function_call_arguments.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": chunk})
			}
			emit("response.function_call_arguments.done", map[string]any{"item_id": it["id"], "output_index": i, "name": it["name"], "arguments": args})
		case "custom_tool_call":
			added["input"] = ""
			emit("response.output_item.added", map[string]any{"output_index": i, "item": added})
			input := it["input"].(string)
			for _, chunk := range openaiChunks(input, 32) {
				emit("response.custom_tool_call_input.delta", map[string]any{"item_id": it["id"], "output_index": i, "delta": chunk})
			}
			emit("response.custom_tool_call_input.done", map[string]any{"item_id": it["id"], "output_index": i, "input": input})
		}
		emit("response.output_item.done", map[string]any{"output_index": i, "item": it})
	}
	emit("response.completed", map[string]any{"response": rep.response("completed")})
}

// responsesWS records which servers accept WebSocket upgrades.
var responsesWS sync.Map // *Server → bool

// ServeResponsesWebSocket makes s accept Codex's WebSocket upgrade of
// /v1/responses and answer over it (on), or refuse it with 426 (off, the
// default). Over the WebSocket each turn is a text frame
// {"type":"response.create", ...the request's fields} and its answer the
// same events as the SSE stream, one JSON text frame each; a turn may
// continue an earlier one with previous_response_id and only the new input
// items, whose tool results then add to the earlier history's.
func (s *Server) ServeResponsesWebSocket(on bool) { responsesWS.Store(s, on) }

func (s *Server) responsesWebSocketOn() bool {
	v, _ := responsesWS.Load(s)
	on, _ := v.(bool)
	return on
}

// WebSocket opcodes (RFC 6455).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xA
)

// wsIdle is how long a WebSocket may stay silent.
const wsIdle = 5 * time.Minute

func (s *Server) responsesWebSocket(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	hj, ok := w.(http.Hijacker)
	if key == "" || r.Header.Get("Sec-WebSocket-Version") != "13" || !ok {
		http.Error(w, `{"error":{"message":"fakellm: bad WebSocket upgrade"}}`, http.StatusUpgradeRequired)
		return
	}
	cred := Credential(r)
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	if brw.Flush() != nil {
		return
	}
	chain := map[string]*responsesReply{} // the answers given, by response id
	for {
		conn.SetReadDeadline(time.Now().Add(wsIdle))
		op, msg, err := wsReadMessage(brw.Reader, conn)
		if err != nil || op == wsClose {
			if op == wsClose {
				wsWriteFrame(conn, wsClose, nil)
			}
			return
		}
		if op != wsText {
			continue
		}
		var turn struct {
			Type               string `json:"type"`
			PreviousResponseID string `json:"previous_response_id"`
		}
		var q responsesRequest
		if json.Unmarshal(msg, &turn) != nil || json.Unmarshal(msg, &q) != nil || turn.Type != "response.create" {
			b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": "fakellm: expected a response.create"}})
			if wsWriteFrame(conn, wsText, b) != nil {
				return
			}
			continue
		}
		rep := s.responsesReply(q, chain[turn.PreviousResponseID], Request{API: "openai-responses-websocket", Path: r.URL.Path, Credential: cred, Stream: true})
		if len(chain) < 4096 {
			chain[rep.id] = rep
		}
		failed := false
		rep.stream(func(_ string, ev map[string]any) {
			if b, _ := json.Marshal(ev); !failed && wsWriteFrame(conn, wsText, b) != nil {
				failed = true
			}
		})
		if failed {
			return
		}
	}
}

// wsReadMessage reads one data message (reassembling fragments, answering
// pings) or a close, bounded by openaiMaxBody.
func wsReadMessage(r *bufio.Reader, w io.Writer) (byte, []byte, error) {
	var msg []byte
	var op byte
	for {
		fin, fop, payload, err := wsReadFrame(r, openaiMaxBody-len(msg))
		if err != nil {
			return 0, nil, err
		}
		switch fop {
		case wsPing:
			if err := wsWriteFrame(w, wsPong, payload); err != nil {
				return 0, nil, err
			}
			continue
		case wsPong:
			continue
		case wsClose:
			return wsClose, nil, nil
		case wsContinuation:
			if op == 0 {
				return 0, nil, errors.New("websocket: continuation without a message")
			}
		case wsText, wsBinary:
			op = fop
		default:
			return 0, nil, fmt.Errorf("websocket: opcode %#x", fop)
		}
		msg = append(msg, payload...)
		if fin {
			return op, msg, nil
		}
	}
}

// wsReadFrame reads one (masked, client) frame of at most limit bytes.
func wsReadFrame(r *bufio.Reader, limit int) (fin bool, op byte, payload []byte, err error) {
	var h [2]byte
	if _, err = io.ReadFull(r, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0f
	if h[0]&0x70 != 0 {
		return false, 0, nil, errors.New("websocket: reserved bits set (no extension was agreed)")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(r, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > uint64(max(limit, 0)) {
		return false, 0, nil, errors.New("websocket: message too large")
	}
	if h[1]&0x80 == 0 {
		return false, 0, nil, errors.New("websocket: unmasked client frame")
	}
	var mask [4]byte
	if _, err = io.ReadFull(r, mask[:]); err != nil {
		return
	}
	payload = make([]byte, n)
	if _, err = io.ReadFull(r, payload); err != nil {
		return
	}
	for i := range payload {
		payload[i] ^= mask[i%4]
	}
	return fin, op, payload, nil
}

// wsWriteFrame writes one unmasked (server) frame.
func wsWriteFrame(w io.Writer, op byte, payload []byte) error {
	h := []byte{0x80 | op}
	switch n := len(payload); {
	case n < 126:
		h = append(h, byte(n))
	case n <= 0xffff:
		h = append(h, 126, byte(n>>8), byte(n))
	default:
		h = append(h, 127)
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	_, err := w.Write(append(h, payload...))
	return err
}

// chatRequest is the part of a Chat Completions request the fake reads.
type chatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role string `json:"role"`
	} `json:"messages"`
	Tools         []json.RawMessage `json:"tools"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) chatUsage() map[string]any {
	return map[string]any{
		"prompt_tokens":             s.Usage.Input + s.Usage.CacheRead,
		"prompt_tokens_details":     map[string]any{"cached_tokens": s.Usage.CacheRead},
		"completion_tokens":         s.Usage.Output,
		"completion_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens":              s.Usage.Input + s.Usage.CacheRead + s.Usage.Output,
	}
}

func (s *Server) openAIChat(w http.ResponseWriter, r *http.Request) {
	var q chatRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, openaiMaxBody)).Decode(&q); err != nil {
		http.Error(w, `{"error":{"message":"fakellm: bad JSON"}}`, http.StatusBadRequest)
		return
	}
	n := 0
	for _, m := range q.Messages {
		if m.Role == "tool" {
			n++
		}
	}
	st, scripted := s.step(n)
	if len(q.Tools) == 0 {
		st, scripted = Step{Text: sideText(st)}, false
	}
	includeUsage := !q.Stream || (q.StreamOptions != nil && q.StreamOptions.IncludeUsage)
	rec := Request{API: "openai-chat", Path: r.URL.Path, Credential: Credential(r), Model: q.Model, Step: n, Stream: q.Stream}
	if includeUsage {
		rec.Usage = s.reportedUsage()
	}
	if !scripted {
		rec.Step = -1
	}
	s.record(rec)

	id := openaiID("chatcmpl-")
	created := time.Now().Unix()
	finish := "stop"
	var calls []map[string]any
	if st.Tool != "" {
		finish = "tool_calls"
		args, _ := json.Marshal(st.Args)
		if st.Args == nil {
			args = []byte("{}")
		}
		calls = append(calls, map[string]any{
			"id": openaiID("call_"), "type": "function",
			"function": map[string]any{"name": st.Tool, "arguments": string(args)},
		})
	}
	if !q.Stream {
		msg := map[string]any{"role": "assistant", "content": nil}
		if st.Text != "" {
			msg["content"] = st.Text
		}
		if calls != nil {
			msg["tool_calls"] = calls
		}
		openaiJSON(w, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": q.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   s.chatUsage(),
		})
		return
	}
	sse := openaiNewSSE(w)
	chunk := func(delta map[string]any, finishReason any) {
		sse.data(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": q.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finishReason}},
		})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	for _, c := range openaiChunks(st.Text, 16) {
		chunk(map[string]any{"content": c}, nil)
	}
	for i, c := range calls {
		fn := c["function"].(map[string]any)
		chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": c["id"], "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": ""},
		}}}, nil)
		for _, a := range openaiChunks(fn["arguments"].(string), 32) {
			chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": a},
			}}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if includeUsage {
		sse.data(map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": q.Model,
			"choices": []any{}, "usage": s.chatUsage(),
		})
	}
	sse.raw("[DONE]")
}

// chunks splits s into pieces of at most n bytes (on rune boundaries).
func openaiChunks(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		i := min(n, len(s))
		for i < len(s) && i > 0 && !openaiRuneStart(s[i]) {
			i--
		}
		if i == 0 {
			i = len(s)
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

func openaiRuneStart(b byte) bool { return b&0xC0 != 0x80 }

func openaiJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// openaiSSE writes Server-Sent Events, flushing each.
type openaiSSE struct {
	w http.ResponseWriter
	f http.Flusher
}

func openaiNewSSE(w http.ResponseWriter) *openaiSSE {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &openaiSSE{w: w, f: f}
}

func (e *openaiSSE) flush() {
	if e.f != nil {
		e.f.Flush()
	}
}

// event writes a named event with v as its JSON data.
func (e *openaiSSE) event(name string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b)
	e.flush()
}

// data writes an unnamed event with v as its JSON data.
func (e *openaiSSE) data(v any) {
	b, _ := json.Marshal(v)
	e.raw(string(b))
}

func (e *openaiSSE) raw(s string) {
	fmt.Fprintf(e.w, "data: %s\n\n", s)
	e.flush()
}

package fakellm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxGeminiBody bounds a request body (a long history with every tool's
// declaration stays far below it).
const maxGeminiBody = 32 << 20

// routeGemini serves the Gemini API's endpoints on mux: generateContent,
// streamGenerateContent (SSE with ?alt=sse, a JSON array without),
// countTokens, and the model list, under v1beta, v1 and v1alpha.
//
// The step of a generate request is the number of functionResponse parts in
// its contents (distinct ids). A request that declares no functions or asks
// for JSON (Gemini CLI's model router, next-speaker and loop checks) is a
// side request: it is answered at step -1, with text, or with a JSON value
// that fits the schema it asked for.
//
// Usage is reported as Gemini does: promptTokenCount includes the cached
// tokens (CacheRead, also in cachedContentTokenCount), and the output is
// split between candidatesTokenCount and thoughtsTokenCount (a quarter);
// Gemini has no cache writes, so CacheWrite is neither reported nor recorded.
func (s *Server) routeGemini(mux *http.ServeMux) {
	for _, v := range []string{"v1beta", "v1", "v1alpha"} {
		mux.HandleFunc("POST /"+v+"/models/{call}", s.geminiCall)
		mux.HandleFunc("GET /"+v+"/models", s.geminiModels)
		mux.HandleFunc("GET /"+v+"/models/{model}", s.geminiModel)
	}
}

// geminiContent is one turn of a Gemini conversation.
type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts"`
}

type geminiPart struct {
	Text             string      `json:"text,omitempty"`
	Thought          bool        `json:"thought,omitempty"`
	FunctionCall     *geminiCall `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"functionResponse,omitempty"`
}

type geminiCall struct {
	ID   string         `json:"id,omitempty"`
	Name string         `json:"name"`
	Args map[string]any `json:"args"`
}

// geminiRequest is the part of a generateContent body the fake reads.
type geminiRequest struct {
	Contents []geminiContent `json:"contents"`
	Tools    []struct {
		FunctionDeclarations []struct {
			Name string `json:"name"`
		} `json:"functionDeclarations"`
	} `json:"tools"`
	GenerationConfig struct {
		ResponseMimeType   string         `json:"responseMimeType"`
		ResponseSchema     map[string]any `json:"responseSchema"`
		ResponseJSONSchema map[string]any `json:"responseJsonSchema"`
	} `json:"generationConfig"`
}

// functionResponses counts the tool results in the history. Gemini CLI
// 0.61.0 repeats each result when it resumes a session (same id twice), so
// results with an id count once per id.
func (r *geminiRequest) functionResponses() int {
	n := 0
	seen := map[string]bool{}
	for _, c := range r.Contents {
		for _, p := range c.Parts {
			fr := p.FunctionResponse
			switch {
			case fr == nil:
			case fr.ID == "":
				n++
			case !seen[fr.ID]:
				seen[fr.ID] = true
				n++
			}
		}
	}
	return n
}

// declares reports whether the request offers the model any function.
func (r *geminiRequest) declares() bool {
	for _, t := range r.Tools {
		if len(t.FunctionDeclarations) > 0 {
			return true
		}
	}
	return false
}

func (r *geminiRequest) wantsJSON() bool {
	return r.GenerationConfig.ResponseMimeType == "application/json" ||
		r.GenerationConfig.ResponseSchema != nil || r.GenerationConfig.ResponseJSONSchema != nil
}

func geminiError(w http.ResponseWriter, code int, status, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg, "status": status}})
}

// geminiCall serves POST .../models/{model}:{method}.
func (s *Server) geminiCall(w http.ResponseWriter, r *http.Request) {
	model, method, ok := strings.Cut(r.PathValue("call"), ":")
	rec := Request{API: "gemini", Path: r.URL.Path, Credential: Credential(r), Model: model, Step: -1}
	if !ok {
		s.record(rec)
		geminiError(w, http.StatusNotFound, "NOT_FOUND", "fakellm: no method in "+r.URL.Path)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxGeminiBody+1))
	if err != nil || len(body) > maxGeminiBody {
		s.record(rec)
		geminiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "fakellm: request body unreadable or too large")
		return
	}
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.record(rec)
		geminiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "fakellm: "+err.Error())
		return
	}
	switch method {
	case "countTokens":
		s.record(rec)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"totalTokens": len(body) / 4})
		return
	case "generateContent", "streamGenerateContent":
	default:
		s.record(rec)
		geminiError(w, http.StatusNotFound, "NOT_FOUND", "fakellm: no method "+method)
		return
	}
	rec.Stream = method == "streamGenerateContent"
	rec.Usage = Usage{Input: s.Usage.Input, Output: s.Usage.Output, CacheRead: s.Usage.CacheRead}

	var parts []map[string]any
	if !req.declares() || req.wantsJSON() {
		text := "Done."
		if req.wantsJSON() {
			schema := req.GenerationConfig.ResponseJSONSchema
			if schema == nil {
				schema = req.GenerationConfig.ResponseSchema
			}
			b, _ := json.Marshal(fitSchema(schema, 0))
			text = string(b)
		}
		parts = []map[string]any{{"text": text}}
	} else {
		step, _ := s.step(req.functionResponses())
		rec.Step = req.functionResponses()
		if step.Text != "" {
			parts = append(parts, map[string]any{"text": step.Text})
		}
		if step.Tool != "" {
			args := step.Args
			if args == nil {
				args = map[string]any{}
			}
			parts = append(parts, map[string]any{"functionCall": map[string]any{"name": step.Tool, "args": args}})
		}
	}
	s.record(rec)

	thoughts := s.Usage.Output / 4
	usage := map[string]any{
		"promptTokenCount":        s.Usage.Input + s.Usage.CacheRead,
		"cachedContentTokenCount": s.Usage.CacheRead,
		"candidatesTokenCount":    s.Usage.Output - thoughts,
		"thoughtsTokenCount":      thoughts,
		"totalTokenCount":         s.Usage.Input + s.Usage.CacheRead + s.Usage.Output,
	}
	resp := map[string]any{
		"candidates": []any{map[string]any{
			"content":      map[string]any{"role": "model", "parts": parts},
			"finishReason": "STOP",
			"index":        0,
		}},
		"usageMetadata": usage,
		"modelVersion":  model,
		"responseId":    fmt.Sprintf("fakellm-%d", len(s.Requests())),
	}
	switch {
	case !rec.Stream:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
	case r.URL.Query().Get("alt") == "sse":
		// The usage goes in the last event only, as the real API's final
		// chunk carries the totals; a text answer is split so clients
		// join chunks.
		w.Header().Set("Content-Type", "text/event-stream")
		fl, _ := w.(http.Flusher)
		for _, ev := range geminiChunks(resp, parts) {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "data: %s\r\n\r\n", b)
			if fl != nil {
				fl.Flush()
			}
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(geminiChunks(resp, parts))
	}
}

// geminiChunks splits a response into stream events: a lone text part is
// sent in two halves, the first without usage or finishReason.
func geminiChunks(resp map[string]any, parts []map[string]any) []map[string]any {
	if len(parts) != 1 {
		return []map[string]any{resp}
	}
	text, ok := parts[0]["text"].(string)
	if !ok || len(text) < 2 {
		return []map[string]any{resp}
	}
	half := len(text) / 2
	first := map[string]any{
		"candidates": []any{map[string]any{
			"content": map[string]any{"role": "model", "parts": []any{map[string]any{"text": text[:half]}}},
			"index":   0,
		}},
		"modelVersion": resp["modelVersion"],
		"responseId":   resp["responseId"],
	}
	last := map[string]any{}
	for k, v := range resp {
		last[k] = v
	}
	last["candidates"] = []any{map[string]any{
		"content":      map[string]any{"role": "model", "parts": []any{map[string]any{"text": text[half:]}}},
		"finishReason": "STOP",
		"index":        0,
	}}
	return []map[string]any{first, last}
}

// fitSchema makes a value of the JSON schema's shape (lower- or upper-case
// type names, as Gemini's OpenAPI subset spells them): the first of an
// enum, "fakellm" for other strings, the minimum (or 1) for numbers, empty arrays, required and listed properties.
func fitSchema(schema map[string]any, depth int) any {
	if schema == nil || depth > 8 {
		return map[string]any{}
	}
	if e, ok := schema["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	typ, _ := schema["type"].(string)
	switch strings.ToLower(typ) {
	case "string":
		return "fakellm"
	case "boolean":
		return false
	case "integer", "number":
		if m, ok := schema["minimum"].(float64); ok {
			return m
		}
		return 1 // scores and counts tend to start at 1
	case "array":
		return []any{}
	}
	out := map[string]any{}
	props, _ := schema["properties"].(map[string]any)
	for name, p := range props {
		ps, _ := p.(map[string]any)
		out[name] = fitSchema(ps, depth+1)
	}
	return out
}

// geminiModels serves the model list.
func (s *Server) geminiModels(w http.ResponseWriter, r *http.Request) {
	s.record(Request{API: "gemini", Path: r.URL.Path, Credential: Credential(r), Step: -1})
	w.Header().Set("Content-Type", "application/json")
	var ms []any
	for _, m := range []string{"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3-pro-preview", "gemini-3-flash-preview"} {
		ms = append(ms, geminiModelInfo(m))
	}
	json.NewEncoder(w).Encode(map[string]any{"models": ms})
}

func (s *Server) geminiModel(w http.ResponseWriter, r *http.Request) {
	s.record(Request{API: "gemini", Path: r.URL.Path, Credential: Credential(r), Model: r.PathValue("model"), Step: -1})
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(geminiModelInfo(r.PathValue("model")))
}

func geminiModelInfo(m string) map[string]any {
	return map[string]any{
		"name":                       "models/" + m,
		"displayName":                m,
		"inputTokenLimit":            1048576,
		"outputTokenLimit":           65536,
		"supportedGenerationMethods": []string{"generateContent", "countTokens"},
	}
}

// Package llmusage reads the model and token usage from LLM API responses as
// they stream past the gateway (Anthropic Messages, OpenAI Responses and Chat
// Completions, Gemini; JSON bodies and server-sent events alike), prices
// them and keeps a sandbox's totals against its budget. It does no I/O.
//
// Convention: Usage.Input counts uncached input tokens only. Providers that
// count cached tokens inside their input figure (OpenAI's input_tokens /
// prompt_tokens with cached_tokens in the details, Gemini's promptTokenCount
// with cachedContentTokenCount) have the cached part moved to CacheRead, so
// no token is counted twice and each is priced at its own rate. Output
// includes reasoning ("thinking") tokens, which every provider bills as
// output.
package llmusage

import (
	"strings"
)

// API is a family of LLM endpoints whose responses this package reads.
type API string

const (
	Anthropic       API = "anthropic"        // POST /v1/messages
	OpenAIResponses API = "openai-responses" // POST /v1/responses, and its WebSocket (GET with an upgrade)
	OpenAIChat      API = "openai-chat"      // POST /v1/chat/completions
	Gemini          API = "gemini"           // POST /v1beta/models/M:generateContent and :streamGenerateContent (and Code Assist's /v1internal:...)
)

// Match recognises a request to an LLM API by its method and path; "" when
// it is none. Only paths are looked at, so the same APIs behind another
// host (a gateway, a compatible provider) are counted too.
func Match(method, path string) API {
	switch {
	case method == "POST" && path == "/v1/messages":
		return Anthropic
	case (method == "POST" || method == "GET") && (path == "/v1/responses" || path == "/backend-api/codex/responses"):
		// The second is Codex signed in with ChatGPT (chatgpt.com).
		return OpenAIResponses
	case method == "POST" && path == "/v1/chat/completions":
		return OpenAIChat
	case method == "POST" && (geminiModel(path) != "" || path == "/v1internal:generateContent" || path == "/v1internal:streamGenerateContent"):
		// The latter two are Gemini CLI signed in with Google (Code Assist,
		// cloudcode-pa.googleapis.com): the same answers wrapped in "response".
		return Gemini
	}
	return ""
}

// geminiModel is M in /v1beta/models/M:generateContent (or /v1/...,
// :streamGenerateContent); "" for any other path.
func geminiModel(path string) string {
	rest, ok := strings.CutPrefix(path, "/v1beta/models/")
	if !ok {
		if rest, ok = strings.CutPrefix(path, "/v1/models/"); !ok {
			return ""
		}
	}
	model, method, ok := strings.Cut(rest, ":")
	if !ok || model == "" || strings.Contains(model, "/") || (method != "generateContent" && method != "streamGenerateContent") {
		return ""
	}
	return model
}

// Usage is tokens by kind; Input is uncached input (see the package doc).
type Usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
}

// Total is every token counted, cache reads and writes included.
func (u Usage) Total() int64 { return u.Input + u.Output + u.CacheRead + u.CacheWrite }

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.Input += o.Input
	u.Output += o.Output
	u.CacheRead += o.CacheRead
	u.CacheWrite += o.CacheWrite
}

// Result is what one response said about itself.
type Result struct {
	API   API
	Model string
	Usage Usage
	Seen  bool // some usage was reported (a response without is an error, or cut short)
}

package llmusage

import (
	"fmt"
	"strings"
	"testing"
)

const anthropicSSE = `event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello \"usage\": {\"output_tokens\": 999}"}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}

event: message_stop
data: {"type":"message_stop"}

`

var longText = strings.Repeat("lorem ipsum \\u00e9 \\\" ", 60000) // about 1.3 MB of JSON string

var responsesSSE = `event: response.created
data: {"type":"response.created","response":{"id":"resp_1","model":"gpt-5","usage":null}}

event: response.output_text.delta
data: {"type":"response.output_text.delta","delta":"Hi"}

event: response.completed
data: {"type":"response.completed","response":{"id":"resp_1","model":"gpt-5-2025-08-07","output":[{"type":"message","content":[{"type":"output_text","text":"` + longText + `"}]}],"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":800},"output_tokens":50,"output_tokens_details":{"reasoning_tokens":30},"total_tokens":1050}}}

`

const chatSSE = "data: {\"id\":\"c1\",\"model\":\"gpt-4.1-mini\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\r\n\r\n" +
	"data: {\"id\":\"c1\",\"model\":\"gpt-4.1-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\r\n\r\n" +
	"data: [DONE]\r\n\r\n"

const geminiChunk1 = `{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"}}],"usageMetadata":{"promptTokenCount":500,"candidatesTokenCount":2,"cachedContentTokenCount":100},"modelVersion":"gemini-2.5-pro"}`
const geminiChunk2 = `{"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":500,"candidatesTokenCount":10,"cachedContentTokenCount":100,"thoughtsTokenCount":40,"totalTokenCount":550},"modelVersion":"gemini-2.5-pro"}`

func TestTapReadsUsageFromEveryAPIAndShape(t *testing.T) {
	tests := map[string]struct {
		api         API
		path, ctype string
		body        string
		model       string
		want        Usage
	}{
		"Anthropic stream: message_start's input and cache, message_delta's cumulative output": {
			Anthropic, "/v1/messages", "text/event-stream; charset=utf-8", anthropicSSE,
			"claude-sonnet-4-5-20250929", Usage{Input: 25, Output: 15, CacheRead: 2000, CacheWrite: 100}},
		"Anthropic JSON body": {
			Anthropic, "/v1/messages", "application/json",
			`{"id":"msg_1","model":"claude-haiku-4-5","content":[{"type":"text","text":"` + longText + `"}],"usage":{"input_tokens":12,"output_tokens":34,"cache_read_input_tokens":5,"cache_creation_input_tokens":6}}`,
			"claude-haiku-4-5", Usage{Input: 12, Output: 34, CacheRead: 5, CacheWrite: 6}},
		"OpenAI Responses stream with a megabyte of text in response.completed": {
			OpenAIResponses, "/v1/responses", "text/event-stream", responsesSSE,
			"gpt-5-2025-08-07", Usage{Input: 200, Output: 50, CacheRead: 800}},
		"OpenAI Responses stream whose completion lists 3000 tools and output items": {
			OpenAIResponses, "/v1/responses", "text/event-stream",
			`data: {"type":"response.completed","response":{"model":"gpt-5-codex","tools":[` + strings.Repeat(`{"type":"function","name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}}}},`, 3000) +
				`{}],"output":[` + strings.Repeat(`{"type":"reasoning","summary":[]},`, 3000) + `{}],"usage":{"input_tokens":5,"output_tokens":6}}}` + "\n\n",
			"gpt-5-codex", Usage{Input: 5, Output: 6}},
		"OpenAI Responses JSON body": {
			OpenAIResponses, "/v1/responses", "application/json",
			`{"id":"resp_2","object":"response","model":"gpt-5-mini","usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":3}}`,
			"gpt-5-mini", Usage{Input: 10, Output: 3}},
		"Chat Completions stream, CRLF lines, usage in the last chunk, [DONE]": {
			OpenAIChat, "/v1/chat/completions", "text/event-stream", chatSSE,
			"gpt-4.1-mini", Usage{Input: 36, Output: 20, CacheRead: 64}},
		"Chat Completions JSON body": {
			OpenAIChat, "/v1/chat/completions", "application/json",
			`{"model":"gpt-4o","choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`,
			"gpt-4o", Usage{Input: 9, Output: 1}},
		"Gemini alt=sse: the last chunk's totals, thoughts billed as output": {
			Gemini, "/v1beta/models/gemini-2.5-pro:streamGenerateContent", "text/event-stream",
			"data: " + geminiChunk1 + "\r\n\r\ndata: " + geminiChunk2 + "\r\n\r\n",
			"gemini-2.5-pro", Usage{Input: 400, Output: 50, CacheRead: 100}},
		"Gemini streamed as a JSON array": {
			Gemini, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "application/json",
			"[" + geminiChunk1 + ",\r\n" + strings.ReplaceAll(geminiChunk2, `"modelVersion":"gemini-2.5-pro"`, `"other":1`) + "]",
			"gemini-2.5-pro", Usage{Input: 400, Output: 50, CacheRead: 100}},
		"Gemini through Code Assist (signed in with Google): the answer wrapped in response": {
			Gemini, "/v1internal:streamGenerateContent", "text/event-stream",
			"data: {\"traceId\":\"t\",\"response\":" + geminiChunk2 + "}\r\n\r\n",
			"gemini-2.5-pro", Usage{Input: 400, Output: 50, CacheRead: 100}},
		"Gemini JSON body without modelVersion takes the model from the path": {
			Gemini, "/v1beta/models/gemini-2.5-flash:generateContent", "application/json",
			`{"candidates":[],"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":3}}`,
			"gemini-2.5-flash", Usage{Input: 7, Output: 3}},
	}
	for name, tt := range tests {
		for _, cut := range []int{0, 1, 7, 4096} {
			t.Run(fmt.Sprintf("%s, in pieces of %d", name, cut), func(t *testing.T) {
				tap := NewTap(tt.api, tt.path, tt.ctype)
				feed(tap, tt.body, cut)
				r := tap.Result()
				if !r.Seen || r.Model != tt.model || r.Usage != tt.want || r.API != tt.api {
					t.Errorf("Result() = %+v, want model %q usage %+v", r, tt.model, tt.want)
				}
				if n := len(tap.json.buf); cap(tap.json.buf) > 2*maxValue {
					t.Errorf("kept %d bytes (capacity %d)", n, cap(tap.json.buf))
				}
			})
		}
	}
}

func feed(tap *Tap, body string, cut int) {
	if cut == 0 {
		tap.Write([]byte(body))
		return
	}
	for i := 0; i < len(body); i += cut {
		tap.Write([]byte(body[i:min(i+cut, len(body))]))
	}
}

func TestTapSkipsWhatItCannotReadWithoutFailing(t *testing.T) {
	tests := map[string]string{
		"a value too large to keep":   "data: {\"pad\":{" + strings.Repeat("\"k\":1,", maxValue/4) + "\"k\":1},\"usage\":{\"input_tokens\":5}}\n\n",
		"not JSON":                    "data: hello\n\n",
		"an event cut off by the end": "data: {\"usage\":{\"input_tokens\":5",
		"a field name too long":       strings.Repeat("d", 100) + ": {\"usage\":{\"input_tokens\":5}}\n\n",
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			tap := NewTap(Anthropic, "/v1/messages", "text/event-stream")
			tap.Write([]byte(body))
			// A following event is still read.
			tap.Write([]byte("\n\ndata: {\"usage\":{\"output_tokens\":3}}\n\n"))
			if r := tap.Result(); r.Usage != (Usage{Output: 3}) {
				t.Errorf("Result() = %+v, want only the good event's output 3", r)
			}
		})
	}
}

func TestTapReadsResponsesEventsFromWebSocketMessages(t *testing.T) {
	tap := NewTap(OpenAIResponses, "/v1/responses", "")
	msgs := []string{
		`{"type":"response.created","response":{"model":"gpt-5-codex","usage":null}}`,
		`{"type":"response.output_text.delta","delta":"x"}`,
		`{"type":"response.completed","response":{"model":"gpt-5-codex","usage":{"input_tokens":70,"input_tokens_details":{"cached_tokens":20},"output_tokens":9}}}`,
	}
	for _, m := range msgs {
		tap.Message([]byte(m[:10]), false)
		tap.Message([]byte(m[10:]), true)
	}
	tap.Message([]byte(`{"truncated":`), true) // a broken message does not spoil the next
	if r := tap.Result(); r.Model != "gpt-5-codex" || r.Usage != (Usage{Input: 50, Output: 9, CacheRead: 20}) {
		t.Errorf("Result() = %+v", r)
	}
}

func TestMatchRecognisesLLMRequestsByMethodAndPath(t *testing.T) {
	tests := map[string]struct {
		method, path string
		want         API
	}{
		"Anthropic Messages":                         {"POST", "/v1/messages", Anthropic},
		"Anthropic token counting is not a response": {"POST", "/v1/messages/count_tokens", ""},
		"OpenAI Responses":                           {"POST", "/v1/responses", OpenAIResponses},
		"OpenAI Responses over a WebSocket":          {"GET", "/v1/responses", OpenAIResponses},
		"Codex signed in with ChatGPT":               {"POST", "/backend-api/codex/responses", OpenAIResponses},
		"Gemini CLI signed in with Google":           {"POST", "/v1internal:streamGenerateContent", Gemini},
		"Code Assist's other methods":                {"POST", "/v1internal:loadCodeAssist", ""},
		"Chat Completions":                           {"POST", "/v1/chat/completions", OpenAIChat},
		"Gemini generateContent":                     {"POST", "/v1beta/models/gemini-2.5-pro:generateContent", Gemini},
		"Gemini streamGenerateContent":               {"POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", Gemini},
		"Gemini countTokens":                         {"POST", "/v1beta/models/gemini-2.5-flash:countTokens", ""},
		"a model list":                               {"GET", "/v1/models", ""},
		"a GET of Messages":                          {"GET", "/v1/messages", ""},
	}
	for name, tt := range tests {
		if got := Match(tt.method, tt.path); got != tt.want {
			t.Errorf("%s: Match(%q, %q) = %q, want %q", name, tt.method, tt.path, got, tt.want)
		}
	}
}

func FuzzTap(f *testing.F) {
	f.Add([]byte(anthropicSSE), uint8(0), uint8(3))
	f.Add([]byte(chatSSE), uint8(2), uint8(1))
	f.Add([]byte("["+geminiChunk1+","+geminiChunk2+"]"), uint8(7), uint8(5))
	f.Add([]byte(`{"s":"\u12`), uint8(1), uint8(2))
	apis := []API{Anthropic, OpenAIResponses, OpenAIChat, Gemini}
	f.Fuzz(func(t *testing.T, body []byte, mode, cut uint8) {
		api := apis[int(mode)%len(apis)]
		ctype := "application/json"
		if mode&4 != 0 {
			ctype = "text/event-stream"
		}
		whole := NewTap(api, "/v1beta/models/m:generateContent", ctype)
		whole.Write(body)
		pieces := NewTap(api, "/v1beta/models/m:generateContent", ctype)
		feed(pieces, string(body), int(cut)%13+1)
		if whole.Result() != pieces.Result() {
			t.Fatalf("in one piece %+v, in pieces %+v", whole.Result(), pieces.Result())
		}
		u := whole.Result().Usage
		if u.Input < 0 || u.Output < 0 || u.CacheRead < 0 || u.CacheWrite < 0 || len(whole.json.buf) > maxValue {
			t.Fatalf("usage %+v, %d bytes kept", u, len(whole.json.buf))
		}
	})
}

// Match runs on every request through the gateway: it must not allocate.
func TestMatchDoesNotAllocate(t *testing.T) {
	paths := []string{"/v1/messages", "/v1beta/models/gemini-2.5-pro:streamGenerateContent", "/static/app.js", "/v1/models/x/y:z"}
	if n := testing.AllocsPerRun(100, func() {
		for _, p := range paths {
			Match("POST", p)
		}
	}); n != 0 {
		t.Errorf("Match allocates %v times per run", n)
	}
}

package llmusage

import (
	"encoding/json"
	"strings"
)

// Bounds on what a Tap keeps: the compacted form of one JSON value (strings
// are cut to maxString bytes, as only short fields are read), and an SSE
// field name. A value whose compact form is larger is skipped, not an error.
const (
	maxValue  = 64 << 10
	maxString = 256
	maxField  = 16
)

// Tap reads one response body as it passes: Write it every piece the
// client is given. It never fails, never blocks and keeps at most maxValue
// bytes, whatever the body. Not safe for concurrent use.
type Tap struct {
	api  API
	sse  bool
	res  Result
	json compactor
	st   state

	// SSE line state.
	lineStart bool
	field     []byte
	kind      byte // 0 reading the field name, 'd' a data line, 'x' another line
	prevCR    bool
}

// NewTap reads a response of api to a request for path whose Content-Type
// is contentType: server-sent events for text/event-stream, otherwise JSON
// (one value, or an array of them as Gemini streams without alt=sse).
func NewTap(api API, path, contentType string) *Tap {
	t := &Tap{api: api, lineStart: true}
	t.res.API = api
	t.res.Model = geminiModel(path)
	t.sse = strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream")
	t.json.emit = t.event
	return t
}

// Result is what was read so far; complete once the body has ended.
func (t *Tap) Result() Result { return t.res }

// Write reads p. It always returns len(p), nil.
func (t *Tap) Write(p []byte) (int, error) {
	if !t.sse {
		t.json.write(p)
		return len(p), nil
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\n' && t.prevCR {
			t.prevCR = false
			continue
		}
		t.prevCR = c == '\r'
		if c == '\n' || c == '\r' {
			if t.lineStart {
				t.json.end() // a blank line ends an event
			}
			t.lineStart, t.kind, t.field = true, 0, t.field[:0]
			continue
		}
		t.lineStart = false
		switch t.kind {
		case 0:
			if c == ':' {
				t.kind = 'x'
				if string(t.field) == "data" {
					t.kind = 'd'
				}
			} else if len(t.field) < maxField {
				t.field = append(t.field, c)
			} else {
				t.kind = 'x'
			}
		case 'd':
			// The value runs on over data lines until the blank line.
			j := i
			for j < len(p) && p[j] != '\n' && p[j] != '\r' {
				j++
			}
			t.json.write(p[i:j])
			i = j - 1
		}
	}
	return len(p), nil
}

// Message reads one piece of a WebSocket text message (OpenAI Responses
// sends each event as one); end marks the message's end.
func (t *Tap) Message(p []byte, end bool) {
	t.json.write(p)
	if end {
		t.json.end()
	}
}

// event applies one JSON value (an event, a chunk or a whole body).
func (t *Tap) event(b []byte) {
	var ev event
	if json.Unmarshal(b, &ev) != nil {
		return
	}
	for _, m := range []string{ev.Model, ev.ModelVersion, ev.Message.model(), ev.Response.model()} {
		if m != "" && len(m) <= 128 {
			t.res.Model = m
		}
	}
	switch t.api {
	case Anthropic:
		// message_start carries the input and cache counts (and an early
		// output count); message_delta's counts are cumulative: each count
		// present replaces the last. A whole JSON body has them at the top.
		for _, u := range []*usageJSON{ev.Message.usage(), ev.Usage} {
			if u == nil {
				continue
			}
			t.res.Seen = true
			set(&t.st.input, u.InputTokens)
			set(&t.st.output, u.OutputTokens)
			set(&t.st.cacheRead, u.CacheRead)
			set(&t.st.cacheWrite, u.CacheWrite)
		}
		t.res.Usage = Usage{Input: t.st.input, Output: t.st.output, CacheRead: t.st.cacheRead, CacheWrite: t.st.cacheWrite}
	case OpenAIResponses, OpenAIChat:
		// Usage comes whole, once (response.completed, the last chat chunk,
		// or the body); a later one replaces it.
		u := ev.Response.usage()
		if u == nil {
			u = ev.Usage
		}
		if u == nil {
			return
		}
		in, out := u.InputTokens, u.OutputTokens
		cached := u.InputDetails.cached()
		if t.api == OpenAIChat || in == nil {
			in, out, cached = u.PromptTokens, u.CompletionTokens, u.PromptDetails.cached()
		}
		t.res.Seen = true
		t.res.Usage = Usage{Input: max(val(in)-cached, 0), Output: val(out), CacheRead: min(cached, val(in))}
	case Gemini:
		// Every chunk may carry usageMetadata, the last the totals.
		u := ev.UsageMetadata
		if u == nil && ev.Response != nil {
			u = ev.Response.UsageMetadata
		}
		if u == nil {
			return
		}
		t.res.Seen = true
		prompt, cached := val(u.Prompt), val(u.Cached)
		t.res.Usage = Usage{Input: max(prompt-cached, 0), Output: val(u.Candidates) + val(u.Thoughts), CacheRead: min(cached, prompt)}
	}
}

type state struct{ input, output, cacheRead, cacheWrite int64 }

func set(dst *int64, v *int64) {
	if v != nil && *v >= 0 {
		*dst = *v
	}
}

func val(v *int64) int64 {
	if v == nil || *v < 0 {
		return 0
	}
	return *v
}

type event struct {
	Model         string       `json:"model"`
	ModelVersion  string       `json:"modelVersion"`
	Usage         *usageJSON   `json:"usage"`
	Message       *inner       `json:"message"`
	Response      *inner       `json:"response"`
	UsageMetadata *geminiUsage `json:"usageMetadata"`
}

type inner struct {
	Model         string       `json:"model"`
	ModelVersion  string       `json:"modelVersion"`
	Usage         *usageJSON   `json:"usage"`
	UsageMetadata *geminiUsage `json:"usageMetadata"` // Code Assist wraps Gemini's answer in "response"
}

func (i *inner) model() string {
	if i == nil {
		return ""
	}
	if i.Model == "" {
		return i.ModelVersion
	}
	return i.Model
}

func (i *inner) usage() *usageJSON {
	if i == nil {
		return nil
	}
	return i.Usage
}

type usageJSON struct {
	InputTokens      *int64   `json:"input_tokens"`
	OutputTokens     *int64   `json:"output_tokens"`
	CacheRead        *int64   `json:"cache_read_input_tokens"`
	CacheWrite       *int64   `json:"cache_creation_input_tokens"`
	PromptTokens     *int64   `json:"prompt_tokens"`
	CompletionTokens *int64   `json:"completion_tokens"`
	InputDetails     *details `json:"input_tokens_details"`
	PromptDetails    *details `json:"prompt_tokens_details"`
}

type details struct {
	Cached *int64 `json:"cached_tokens"`
}

func (d *details) cached() int64 {
	if d == nil {
		return 0
	}
	return val(d.Cached)
}

type geminiUsage struct {
	Prompt     *int64 `json:"promptTokenCount"`
	Candidates *int64 `json:"candidatesTokenCount"`
	Cached     *int64 `json:"cachedContentTokenCount"`
	Thoughts   *int64 `json:"thoughtsTokenCount"`
}

// compactor finds the JSON objects in a stream — each top-level object, or
// each object element of a top-level array — and hands each to emit in a
// compact form: whitespace outside strings dropped, strings cut to
// maxString bytes, and arrays inside the object emptied (no usage figure is
// in one; the text, tool calls and tool schemas that are make an object
// large). It keeps one such object at a time, at most maxValue bytes of
// it; a larger one is dropped.
type compactor struct {
	emit func([]byte)

	buf      []byte
	depth    int
	arrayTop bool // the top-level value is an array: collect its elements
	collect  int  // depth at which the object being collected started; -1 none
	over     bool // the object outgrew maxValue
	inStr    bool
	bs       bool // the last string byte was a backslash
	hex      int  // \u hex digits still to come
	strLen   int
	keep     bool // still keeping this string's bytes
	started  bool
	skip     int // >0: inside an array opened at this depth, whose contents are dropped
}

func (c *compactor) reset() {
	emit := c.emit
	buf := c.buf[:0]
	*c = compactor{emit: emit, buf: buf}
}

// end forgets any value in progress (an SSE event or a message ended).
func (c *compactor) end() { c.reset() }

func (c *compactor) add(b byte) {
	if !c.started || c.over || c.skip > 0 {
		return
	}
	if len(c.buf) >= maxValue {
		c.over, c.buf = true, c.buf[:0]
		return
	}
	c.buf = append(c.buf, b)
}

func (c *compactor) write(p []byte) {
	for _, b := range p {
		if c.inStr {
			end := b == '"' && !c.bs && c.hex == 0
			if end {
				c.inStr = false
				c.add(b)
				continue
			}
			if c.keep && c.strLen >= maxString && !c.bs && c.hex == 0 {
				c.keep = false // cut between characters, never inside an escape
			}
			if c.keep {
				c.add(b)
				c.strLen++
			}
			switch {
			case c.bs:
				c.bs = false
				if b == 'u' {
					c.hex = 4
				}
			case c.hex > 0:
				c.hex--
			case b == '\\':
				c.bs = true
			}
			continue
		}
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			c.inStr, c.strLen, c.keep, c.bs, c.hex = true, 0, true, false, 0
			c.add(b)
		case '{', '[':
			if !c.started && b == '{' && (c.depth == 0 || c.depth == 1 && c.arrayTop) {
				c.started, c.collect, c.over, c.buf = true, c.depth, false, c.buf[:0]
			}
			if c.depth == 0 {
				c.arrayTop = b == '['
			}
			c.depth++
			c.add(b)
			if b == '[' && c.started && c.skip == 0 {
				c.skip = c.depth
			}
		case '}', ']':
			if c.skip > 0 && c.depth <= c.skip {
				c.skip = 0 // the dropped array ends
			}
			c.add(b)
			c.depth--
			if c.depth < 0 {
				c.depth = 0
			}
			if c.started && c.depth == c.collect {
				if !c.over {
					c.emit(c.buf)
				}
				c.started, c.over, c.buf = false, false, c.buf[:0]
			}
		default:
			c.add(b)
		}
	}
}

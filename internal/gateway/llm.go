package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/llmusage"
)

// LLM requests (recognised by path alone: llmusage.Match) are metered when
// the gateway has a Meter: their responses are read as they pass, one audit
// record each, and once the sandbox's budget is spent the next one is
// refused before it leaves. A request already in flight finishes: a stream
// is never cut short.

// budgetStatus answers a refused LLM request. 402 rather than 429: the
// providers' SDKs (Anthropic, OpenAI, Google) retry 429 with backoff, so an
// agent would sit through retries that cannot succeed; 402 is not retried
// and the agent shows the message at once. It is also what Anthropic answers
// for billing errors.
const budgetStatus = http.StatusPaymentRequired

// refuseLLM answers a request refused because the budget is spent, in the
// API's own error shape so the agent prints the message.
func (u *upstream) refuseLLM(w http.ResponseWriter, r *http.Request, api llmusage.API, why string) {
	msg := "airlock: " + why + "; LLM requests from this sandbox are refused (raise --budget-tokens or --budget-usd for the next run)"
	var body any
	switch api {
	case llmusage.Anthropic:
		body = map[string]any{"type": "error", "error": map[string]any{"type": "billing_error", "message": msg}}
	case llmusage.Gemini:
		body = map[string]any{"error": map[string]any{"code": budgetStatus, "message": msg, "status": "RESOURCE_EXHAUSTED"}}
	default:
		body = map[string]any{"error": map[string]any{"message": msg, "type": "insufficient_quota", "param": nil, "code": "insufficient_quota"}}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(budgetStatus)
	w.Write(b)
	m := u.g.cfg.Meter
	m.Refuse()
	u.g.record(llmRecord(u.t.host, r.Method, r.URL.Path, budgetStatus, audit.Deny, why, api, llmusage.Result{API: api}, 0, false, m.Totals()))
}

// count adds one response's usage to the meter and audits it; it returns
// why the budget is now spent, if it is.
func (u *upstream) count(method, path string, status int, res llmusage.Result) string {
	m := u.g.cfg.Meter
	cost, exact, tot := m.Add(res)
	reason := ""
	if !res.Seen {
		reason = "no usage in the response"
	}
	u.g.record(llmRecord(u.t.host, method, path, status, audit.Allow, reason, res.API, res, cost, exact, tot))
	return m.Spent()
}

func llmRecord(host, method, path string, status int, decision, reason string, api llmusage.API, res llmusage.Result, cost float64, exact bool, tot llmusage.Totals) audit.Record {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	x := map[string]string{
		"api":         string(api),
		"input":       i(res.Usage.Input),
		"output":      i(res.Usage.Output),
		"cache_read":  i(res.Usage.CacheRead),
		"cache_write": i(res.Usage.CacheWrite),
		"tokens":      i(res.Usage.Total()),
	}
	tot.Fields(x)
	if cost > 0 || exact {
		x["usd"] = llmusage.USD(cost)
		if !exact {
			x["usd_estimated"] = "true" // no price for the model: its API's fallback
		}
	}
	return audit.Record{Kind: audit.KindLLM, Host: host, Method: method, Path: path, Status: status, Subject: res.Model,
		Decision: decision, Reason: reason, Extra: x}
}

// tapBody reads an LLM response body into a tap as the client reads it, and
// counts it once when the body ends or is closed.
type tapBody struct {
	rc   io.ReadCloser
	tap  *llmusage.Tap
	left int64 // bytes to come when the length is known, else -1
	once sync.Once
	done func(llmusage.Result)
}

func (t *tapBody) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if n > 0 {
		t.tap.Write(p[:n])
	}
	if t.left >= 0 {
		// A sized body is complete for the client with its last byte,
		// before the read that returns EOF: count it now, so that a next
		// request cannot overtake the count.
		t.left -= int64(n)
	}
	if err != nil || t.left == 0 {
		t.finish()
	}
	return n, err
}

func (t *tapBody) Close() error {
	t.finish()
	return t.rc.Close()
}

func (t *tapBody) finish() { t.once.Do(func() { t.done(t.tap.Result()) }) }

// tapResponse puts a tap on an LLM response's body.
func (u *upstream) tapResponse(resp *http.Response, st *reqState) {
	method, path, status := resp.Request.Method, resp.Request.URL.Path, resp.StatusCode
	if resp.Body == nil || resp.Body == http.NoBody {
		u.count(method, path, status, llmusage.Result{API: st.api})
		return
	}
	resp.Body = &tapBody{rc: resp.Body, tap: llmusage.NewTap(st.api, path, resp.Header.Get("Content-Type")), left: resp.ContentLength,
		done: func(r llmusage.Result) { u.count(method, path, status, r) }}
}

// wsTap reads the events of an OpenAI Responses WebSocket: each text
// message is one event, and each with usage (response.completed) is one
// response, counted and audited. Once the budget is spent the relay closes
// the connection after that message, so the next response.create has to
// reconnect and is refused.
func (u *upstream) wsTap(st *reqState, d *wsDir, path string) func([]byte, bool) {
	var tap *llmusage.Tap
	return func(p []byte, end bool) {
		if tap == nil {
			tap = llmusage.NewTap(st.api, path, "")
		}
		tap.Message(p, end)
		if !end {
			return
		}
		if r := tap.Result(); r.Seen {
			if why := u.count(http.MethodGet, path, http.StatusSwitchingProtocols, r); why != "" {
				d.stop = why
			}
		}
		tap = nil
	}
}

// wsGate refuses the sandbox's next message on a Responses WebSocket once
// the budget is spent (audited like a refused request); the relay then
// closes the connection with the reason.
func (u *upstream) wsGate(st *reqState, path string) func() error {
	return func() error {
		m := u.g.cfg.Meter
		why := m.Spent()
		if why == "" {
			return nil
		}
		m.Refuse()
		u.g.record(llmRecord(u.t.host, http.MethodGet, path, http.StatusSwitchingProtocols, audit.Deny, why, st.api, llmusage.Result{API: st.api}, 0, false, m.Totals()))
		return &refusal{why: why}
	}
}

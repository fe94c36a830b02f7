package llmusage

import (
	"fmt"
	"path"
	"strconv"
	"sync"
)

// Price is USD per million tokens of each kind. A zero cache price charges
// that kind at the input price: for a budget, too high is safer than free.
type Price struct {
	Input, Output, CacheRead, CacheWrite float64
}

// Cost is what u costs at p, in USD.
func (p Price) Cost(u Usage) float64 {
	cr, cw := p.CacheRead, p.CacheWrite
	if cr == 0 {
		cr = p.Input
	}
	if cw == 0 {
		cw = p.Input
	}
	return (float64(u.Input)*p.Input + float64(u.Output)*p.Output + float64(u.CacheRead)*cr + float64(u.CacheWrite)*cw) / 1e6
}

// builtinPrices are list prices per million tokens, standard tier. Dated:
// Anthropic's are the model catalog bundled with Claude Code 2.1.330
// (November 2026; cache writes at the 5-minute rate); OpenAI's and
// Gemini's are as those providers published them in late 2025 (Gemini at
// the ≤200k-token-prompt rate), as newer ones could not be checked. A
// config's prices add to and override them; a model in none is charged at
// its API's fallbackPrices. Keep it small: the models agents use.
var builtinPrices = map[string]Price{
	"claude-opus-5-5*":       {Input: 4, Output: 20, CacheRead: 0.2, CacheWrite: 5},
	"claude-opus-5*":         {Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25},
	"claude-opus-4-5*":       {Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25},
	"claude-opus-4-6*":       {Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25},
	"claude-opus-4-7*":       {Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25},
	"claude-opus-4-8*":       {Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25},
	"claude-opus-4*":         {Input: 15, Output: 75, CacheRead: 1.5, CacheWrite: 18.75}, // 4-0, 4-1
	"claude-sonnet-5-5*":     {Input: 2, Output: 10, CacheRead: 0.1, CacheWrite: 2.5},
	"claude-sonnet-5*":       {Input: 2, Output: 10, CacheRead: 0.2, CacheWrite: 2.5},
	"claude-sonnet-4*":       {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
	"claude-3-7-sonnet*":     {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
	"claude-haiku-5-5*":      {Input: 0.1, Output: 0.5, CacheRead: 0.01, CacheWrite: 0.125},
	"claude-haiku-4*":        {Input: 1, Output: 5, CacheRead: 0.1, CacheWrite: 1.25},
	"claude-3-5-haiku*":      {Input: 0.8, Output: 4, CacheRead: 0.08, CacheWrite: 1},
	"claude-fable-5-2*":      {Input: 8, Output: 40, CacheRead: 0.2, CacheWrite: 10},
	"claude-fable-5-1*":      {Input: 10, Output: 50, CacheRead: 0.25, CacheWrite: 12.5},
	"claude-fable-5*":        {Input: 10, Output: 50, CacheRead: 1, CacheWrite: 12.5},
	"claude-mythos-5-2*":     {Input: 8, Output: 40, CacheRead: 0.2, CacheWrite: 10},
	"claude-mythos-5-1*":     {Input: 10, Output: 50, CacheRead: 0.25, CacheWrite: 12.5},
	"claude-mythos-5*":       {Input: 10, Output: 50, CacheRead: 1, CacheWrite: 12.5},
	"gpt-5*":                 {Input: 1.25, Output: 10, CacheRead: 0.125},
	"gpt-5-mini*":            {Input: 0.25, Output: 2, CacheRead: 0.025},
	"gpt-5-nano*":            {Input: 0.05, Output: 0.4, CacheRead: 0.005},
	"gpt-4.1*":               {Input: 2, Output: 8, CacheRead: 0.5},
	"gpt-4.1-mini*":          {Input: 0.4, Output: 1.6, CacheRead: 0.1},
	"gpt-4o*":                {Input: 2.5, Output: 10, CacheRead: 1.25},
	"gpt-4o-mini*":           {Input: 0.15, Output: 0.6, CacheRead: 0.075},
	"o3*":                    {Input: 2, Output: 8, CacheRead: 0.5},
	"o4-mini*":               {Input: 1.1, Output: 4.4, CacheRead: 0.275},
	"gemini-2.5-pro*":        {Input: 1.25, Output: 10, CacheRead: 0.125},
	"gemini-2.5-flash*":      {Input: 0.3, Output: 2.5, CacheRead: 0.03},
	"gemini-2.5-flash-lite*": {Input: 0.1, Output: 0.4, CacheRead: 0.01},
	"gemini-3-pro*":          {Input: 2, Output: 12, CacheRead: 0.2},
}

// fallbackPrices charge a model no table prices (a newer one, a renamed
// one) at a deliberately high rate for its API: a budget in dollars must
// not stop counting because a model name is new. The audit record says the
// cost is an estimate; budget.prices makes it exact.
var fallbackPrices = map[API]Price{
	Anthropic:       {Input: 10, Output: 50, CacheRead: 1, CacheWrite: 12.5}, // the dearest in the table
	OpenAIResponses: {Input: 5, Output: 40, CacheRead: 0.5},
	OpenAIChat:      {Input: 5, Output: 40, CacheRead: 0.5},
	Gemini:          {Input: 4, Output: 24, CacheRead: 0.4},
}

// PriceOf finds model's price: the longest glob (path.Match) in extra that
// matches, else the longest in the built-in table.
func PriceOf(model string, extra map[string]Price) (Price, bool) {
	if p, ok := longestMatch(model, extra); ok {
		return p, true
	}
	return longestMatch(model, builtinPrices)
}

func longestMatch(model string, table map[string]Price) (Price, bool) {
	best, found := "", false
	var bp Price
	for g, p := range table {
		if ok, _ := path.Match(g, model); ok && (!found || len(g) > len(best) || len(g) == len(best) && g < best) {
			best, bp, found = g, p, true
		}
	}
	return bp, found
}

// Budget bounds a sandbox's LLM use; zero fields are no bound.
type Budget struct {
	Tokens int64
	USD    float64
	Prices map[string]Price // over the built-in table
}

// Totals are a sandbox's LLM use so far.
type Totals struct {
	Requests int64   `json:"requests"` // responses seen
	Usage    Usage   `json:"usage"`
	Tokens   int64   `json:"tokens"`
	USD      float64 `json:"usd"`
	Unpriced int64   `json:"unpriced,omitempty"` // responses from models without a price (in USD at their API's fallback price)
	Refused  int64   `json:"refused,omitempty"`  // requests refused because the budget was spent

	BudgetTokens int64   `json:"budget_tokens,omitempty"`
	BudgetUSD    float64 `json:"budget_usd,omitempty"`
}

// Meter keeps one sandbox's totals against its budget. Safe for concurrent use.
type Meter struct {
	mu     sync.Mutex
	budget Budget
	t      Totals
}

// NewMeter starts a sandbox's totals at zero.
func NewMeter(b Budget) *Meter {
	return &Meter{budget: b, t: Totals{BudgetTokens: b.Tokens, BudgetUSD: b.USD}}
}

// Add counts one response and returns its cost (exact false when its
// model has no price and the cost is its API's fallback estimate) and the
// totals after it.
func (m *Meter) Add(r Result) (cost float64, exact bool, t Totals) {
	p, exact := PriceOf(r.Model, m.budget.Prices)
	if !exact {
		p = fallbackPrices[r.API]
	}
	cost = p.Cost(r.Usage)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.t.Requests++
	m.t.Usage.Add(r.Usage)
	m.t.Tokens += r.Usage.Total()
	m.t.USD += cost
	if !exact && r.Usage.Total() > 0 {
		m.t.Unpriced++
	}
	return cost, exact, m.t
}

// Spent says why no more LLM requests may leave; "" while the budget lasts.
func (m *Meter) Spent() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	why := ""
	switch b := m.budget; {
	case b.Tokens > 0 && m.t.Tokens >= b.Tokens:
		why = fmt.Sprintf("the sandbox's budget of %d tokens is spent (used %d)", b.Tokens, m.t.Tokens)
	case b.USD > 0 && m.t.USD >= b.USD:
		why = fmt.Sprintf("the sandbox's budget of $%s is spent (used $%s)", USD(b.USD), USD(m.t.USD))
	}
	return why
}

// Refuse counts a request refused because the budget is spent.
func (m *Meter) Refuse() {
	m.mu.Lock()
	m.t.Refused++
	m.mu.Unlock()
}

// Totals returns the totals so far.
func (m *Meter) Totals() Totals {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}

// USD formats dollars as the audit log and messages show them: 4 decimals,
// as cents are too coarse for one small request.
func USD(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// Fields are t as audit record extras ("total_*", "budget_*"), which
// ParseTotals reads back: each llm record carries the running totals, so
// the last one tells a sandbox's use, running or gone.
func (t Totals) Fields(into map[string]string) {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	into["total_requests"] = i(t.Requests)
	into["total_input"] = i(t.Usage.Input)
	into["total_output"] = i(t.Usage.Output)
	into["total_cache_read"] = i(t.Usage.CacheRead)
	into["total_cache_write"] = i(t.Usage.CacheWrite)
	into["total_tokens"] = i(t.Tokens)
	into["total_usd"] = USD(t.USD)
	if t.Unpriced > 0 {
		into["total_unpriced"] = i(t.Unpriced)
	}
	if t.Refused > 0 {
		into["total_refused"] = i(t.Refused)
	}
	if t.BudgetTokens > 0 {
		into["budget_tokens"] = i(t.BudgetTokens)
	}
	if t.BudgetUSD > 0 {
		into["budget_usd"] = USD(t.BudgetUSD)
	}
}

// ParseTotals reads what Fields wrote; missing or bad fields are zero.
func ParseTotals(f map[string]string) Totals {
	i := func(k string) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	x := func(k string) float64 { v, _ := strconv.ParseFloat(f[k], 64); return v }
	return Totals{
		Requests: i("total_requests"),
		Usage:    Usage{Input: i("total_input"), Output: i("total_output"), CacheRead: i("total_cache_read"), CacheWrite: i("total_cache_write")},
		Tokens:   i("total_tokens"), USD: x("total_usd"), Unpriced: i("total_unpriced"), Refused: i("total_refused"),
		BudgetTokens: i("budget_tokens"), BudgetUSD: x("budget_usd"),
	}
}

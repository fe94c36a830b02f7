package llmusage

import (
	"math"
	"strings"
	"testing"
)

func TestPriceOfPrefersConfigThenTheLongestGlob(t *testing.T) {
	extra := map[string]Price{"claude-sonnet-4-5*": {Input: 1, Output: 2}, "my-model": {Input: 7}}
	tests := map[string]struct {
		model  string
		want   Price
		priced bool
	}{
		"a config glob overrides the built-in table":  {"claude-sonnet-4-5-20250929", Price{Input: 1, Output: 2}, true},
		"a built-in entry for a dated model name":     {"claude-sonnet-4-20250514", builtinPrices["claude-sonnet-4*"], true},
		"the longer built-in glob wins (gpt-5-mini)":  {"gpt-5-mini-2025-08-07", builtinPrices["gpt-5-mini*"], true},
		"the shorter one where the longer fails":      {"gpt-5-codex", builtinPrices["gpt-5*"], true},
		"Gemini flash-lite is not priced as flash":    {"gemini-2.5-flash-lite", builtinPrices["gemini-2.5-flash-lite*"], true},
		"an exact config name":                        {"my-model", Price{Input: 7}, true},
		"an unknown model has no price":               {"llama-3", Price{}, false},
		"an empty model (no model reported) has none": {"", Price{}, false},
	}
	for name, tt := range tests {
		p, ok := PriceOf(tt.model, extra)
		if p != tt.want || ok != tt.priced {
			t.Errorf("%s: PriceOf(%q) = %+v, %v; want %+v, %v", name, tt.model, p, ok, tt.want, tt.priced)
		}
	}
}

func TestCostChargesEachKindAtItsRateAndMissingCacheRatesAsInput(t *testing.T) {
	u := Usage{Input: 1_000_000, Output: 2_000_000, CacheRead: 10_000_000, CacheWrite: 1_000_000}
	if got := (Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}).Cost(u); math.Abs(got-(3+30+3+3.75)) > 1e-9 {
		t.Errorf("Cost = %v, want 39.75", got)
	}
	if got := (Price{Input: 2, Output: 1}).Cost(u); math.Abs(got-(2+2+20+2)) > 1e-9 {
		t.Errorf("Cost without cache rates = %v, want 26 (cache at the input rate)", got)
	}
}

func TestMeterIsSpentOnceTotalsReachTheBudget(t *testing.T) {
	m := NewMeter(Budget{Tokens: 100})
	if why := m.Spent(); why != "" {
		t.Fatalf("a fresh meter is spent: %s", why)
	}
	cost, priced, tot := m.Add(Result{Model: "claude-haiku-4-5", Usage: Usage{Input: 40, Output: 20, CacheRead: 10}})
	if !priced || cost <= 0 || tot.Tokens != 70 || tot.Requests != 1 {
		t.Fatalf("Add = %v %v %+v", cost, priced, tot)
	}
	if why := m.Spent(); why != "" {
		t.Fatalf("spent at 70 of 100: %s", why)
	}
	m.Add(Result{Model: "unknown", Usage: Usage{Output: 30}})
	why := m.Spent()
	if !strings.Contains(why, "budget of 100 tokens is spent (used 100)") {
		t.Fatalf("Spent() = %q", why)
	}
	m.Refuse()
	if tot := m.Totals(); tot.Unpriced != 1 || tot.Refused != 1 || tot.BudgetTokens != 100 || tot.Usage != (Usage{Input: 40, Output: 50, CacheRead: 10}) {
		t.Errorf("Totals() = %+v", tot)
	}

	d := NewMeter(Budget{USD: 0.01, Prices: map[string]Price{"m": {Input: 10000}}})
	d.Add(Result{Model: "m", Usage: Usage{Input: 1}})
	if why := d.Spent(); !strings.Contains(why, "budget of $0.0100 is spent (used $0.0100)") {
		t.Errorf("USD Spent() = %q", why)
	}
}

func TestTotalsSurviveTheirAuditFields(t *testing.T) {
	in := Totals{Requests: 3, Usage: Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite: 4}, Tokens: 10, USD: 0.0123, Unpriced: 1, Refused: 2, BudgetTokens: 9, BudgetUSD: 1.5}
	f := map[string]string{}
	in.Fields(f)
	if out := ParseTotals(f); out != in {
		t.Errorf("ParseTotals(Fields(%+v)) = %+v", in, out)
	}
}

func TestAModelWithoutAPriceIsChargedAtItsAPIsFallback(t *testing.T) {
	m := NewMeter(Budget{USD: 1})
	cost, exact, tot := m.Add(Result{API: OpenAIResponses, Model: "gpt-6.1-sol", Usage: Usage{Input: 100_000, Output: 20_000}})
	if exact || cost <= 0 || tot.Unpriced != 1 || tot.USD != cost {
		t.Fatalf("Add(an unpriced model) = %v, %v, %+v: want an estimated cost counted", cost, exact, tot)
	}
	if why := m.Spent(); !strings.Contains(why, "budget of $1.0000 is spent") {
		t.Errorf("Spent() = %q: a dollar budget must end with unknown models too", why)
	}
	if p, _ := PriceOf("claude-opus-5-5-20261001", nil); p.Input != 4 {
		t.Errorf("claude-opus-5-5 priced %+v, want its own entry over claude-opus-5*", p)
	}
}

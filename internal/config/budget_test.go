package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestBudgetKeysParseAndPricesMergeByGlob(t *testing.T) {
	global := mustParse(t, `
budget:
  tokens: 1000000
  usd: 2.5
  prices:
    "claude-sonnet-*": {input: 3, output: 15, cache_read: 0.3, cache_write: 3.75}
    my-model: {input: 1}
`)
	project := mustParse(t, `
budget:
  usd: 1
  prices:
    my-model: {input: 2, output: 4}
`)
	flags := Defaults()
	if err := flags.SetFlag("budget.tokens", "--budget-tokens", []string{"500"}); err != nil {
		t.Fatal(err)
	}
	s, _ := Merge(Defaults(), global, project, flags)
	want := Budget{Tokens: 500, USD: 1, Prices: map[string]Price{
		"claude-sonnet-*": {Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75},
		"my-model":        {Input: 2, Output: 4},
	}}
	if !reflect.DeepEqual(s.Budget, want) {
		t.Errorf("Budget = %+v, want %+v", s.Budget, want)
	}
}

func TestBadBudgetsAreRefusedWithTheKey(t *testing.T) {
	for text, want := range map[string]string{
		"budget: {tokens: -1}":                  "budget.tokens",
		"budget: {usd: lots}":                   "budget.usd",
		"budget: {prices: [a]}":                 "budget.prices",
		"budget: {prices: {m: {input: -1}}}":    "budget.prices.m.input",
		"budget: {prices: {m: {inputs: 1}}}":    "budget.prices.m.inputs: unknown key",
		"budget: {prices: {\"[\": {input: 1}}}": "not a valid glob",
		"budget: {prices: {m: 3}}":              "expected a mapping of input",
	} {
		_, err := Parse("cfg.yaml", []byte(text+"\n"), SourceGlobal)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error naming %q", text, err, want)
		}
	}
}

func TestShowWritesABudgetThatParsesBack(t *testing.T) {
	in := Spec{Budget: Budget{Tokens: 7, USD: 0.5, Prices: map[string]Price{"gpt-*": {Input: 1, Output: 2, CacheRead: 0.1}}}}
	var b strings.Builder
	if err := Show(&b, in, nil); err != nil {
		t.Fatal(err)
	}
	l, err := Parse("shown.yaml", []byte(b.String()), SourceGlobal)
	if err != nil {
		t.Fatalf("Parse(Show) = %v\n%s", err, b.String())
	}
	if out, _ := Merge(l); !reflect.DeepEqual(out.Budget, in.Budget) {
		t.Errorf("Budget after Show and Parse = %+v, want %+v\n%s", out.Budget, in.Budget, b.String())
	}
}

package mcppolicy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeArgsRefusesWhatAServerCouldDecodeOtherwise(t *testing.T) {
	refused := map[string]struct{ raw, want string }{
		"a lone high surrogate escape":          {`{"path":"/r/\ud800x"}`, "lone surrogate"},
		"a lone low surrogate escape":           {`{"path":"/r/\udc00"}`, "lone surrogate"},
		"a high surrogate at the end":           {`{"path":"\ud83d"}`, "lone surrogate"},
		"a high surrogate before a non-low one": {`{"path":"\ud83d\u0041"}`, "lone surrogate"},
		"two high surrogates":                   {`{"path":"\ud83d\ud83d"}`, "lone surrogate"},
		"a lone surrogate in a key":             {`{"\ud800":"x"}`, "lone surrogate"},
		"an escaped NUL":                        {`{"path":"/r/a\u0000/etc/passwd"}`, "NUL"},
		"invalid UTF-8 bytes":                   {"{\"path\":\"/r/\xe2\x82/x\"}", "not valid UTF-8"},
		"an overlong encoding of /":             {"{\"path\":\"/r/..\xc0\xafetc\"}", "not valid UTF-8"},
		"an encoded surrogate (CESU-8)":         {"{\"path\":\"/r/\xed\xa0\x80\"}", "not valid UTF-8"},
		"a key given twice":                     {`{"path":"/r/ok","path":"/etc/passwd"}`, `"path" twice`},
		"a nested key given twice":              {`{"o":{"a":1,"a":2}}`, `"a" twice`},
		"a list, not an object":                 {`["/etc/passwd"]`, "a list, not an object"},
		"a string, not an object":               {`"/etc/passwd"`, "a string, not an object"},
		"two values":                            {`{} {}`, "not valid JSON"},
		"broken JSON":                           {`{"path":`, "not valid JSON"},
		"nesting past 64 levels":                {strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70), "nested more than 64"},
		"over 1 MiB":                            {`{"content":"` + strings.Repeat("x", MaxArgs) + `"}`, "over the limit"},
	}
	for name, tc := range refused {
		if _, err := DecodeArgs([]byte(tc.raw)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecodeArgs = %v, want an error with %q", name, err, tc.want)
		}
	}
	// Positive controls: what decodes one way only decodes, exactly.
	accepted := map[string]struct {
		raw  string
		want map[string]any
	}{
		"a surrogate pair escape":      {`{"path":"/r/\ud83d\ude00"}`, map[string]any{"path": "/r/😀"}},
		"escapes of plain characters":  {`{"path":"\u002fr\/\u0061\\\"\n"}`, map[string]any{"path": "/r/a\\\"\n"}},
		"raw UTF-8, NFD and fullwidth": {`{"path":"/r/é／ｅｔｃ"}`, map[string]any{"path": "/r/é／ｅｔｃ"}},
		"U+FFFD sent as such":          {`{"t":"\ufffd"}`, map[string]any{"t": "\ufffd"}},
		"numbers, lists, nesting":      {`{"n":1.5,"l":[true,null,{"a":"b"}]}`, map[string]any{"n": 1.5, "l": []any{true, nil, map[string]any{"a": "b"}}}},
		"keys that differ in case":     {`{"path":"a","Path":"b"}`, map[string]any{"path": "a", "Path": "b"}},
		"nothing":                      {``, nil},
		"null":                         {` null `, nil},
		"an empty object":              {`{}`, map[string]any{}},
	}
	for name, tc := range accepted {
		got, err := DecodeArgs([]byte(tc.raw))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: DecodeArgs = %#v, %v, want %#v", name, got, err, tc.want)
		}
	}
}

func TestCheckStringsRefusesNULAndTheReplacementCharacter(t *testing.T) {
	for name, args := range map[string]map[string]any{
		"NUL in a value":  {"uri": "file:///r/a\x00b"},
		"U+FFFD in a key": {"name": "x", "\ufffd": "y"},
		"U+FFFD nested":   {"a": []any{map[string]any{"b": "/r/\ufffd"}}},
	} {
		if err := CheckStrings(args); err == nil {
			t.Errorf("%s: CheckStrings(%q) = nil, want a refusal", name, args)
		}
	}
	if err := CheckStrings(map[string]any{"uri": "file:///r/é／x", "n": 1.0}); err != nil {
		t.Errorf("CheckStrings of plain text = %v", err)
	}
}

// FuzzDecodeArgs: whatever DecodeArgs accepts re-encodes to JSON that
// encoding/json decodes to the same value (nothing was replaced on the way).
func FuzzDecodeArgs(f *testing.F) {
	for _, s := range []string{`{"path":"\ud83d\ude00"}`, `{"p":"\ud800"}`, "{\"p\":\"\xff\"}", `{"a":1,"a":2}`, `{"a":[{"b":"\u0000"}]}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := DecodeArgs(raw)
		if err != nil || args == nil {
			return
		}
		if !utf8.Valid(raw) {
			t.Fatalf("DecodeArgs accepted invalid UTF-8 %q", raw)
		}
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatalf("re-encode %q: %v", raw, err)
		}
		var again map[string]any
		if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, args) {
			t.Fatalf("%q decoded to %#v, re-encoded to %s, decoded again to %#v", raw, args, b, again)
		}
		var std map[string]any
		if err := json.Unmarshal(raw, &std); err != nil || !reflect.DeepEqual(std, args) {
			t.Fatalf("%q: DecodeArgs %#v, encoding/json %#v (%v)", raw, args, std, err)
		}
	})
}

func TestADenyWithoutConditionsOverAnAllowedToolIsAConfigError(t *testing.T) {
	refused := map[string][]Rule{
		"a catch-all deny after the allows": {
			{Tool: "read_*", Verdict: Allow}, {Tool: "*", Verdict: Deny}},
		"a catch-all deny before an escalation": {
			{Tool: "**", Verdict: Deny}, {Tool: "write_file", Verdict: Escalate}},
		"a glob deny over a named allow": {
			{Tool: "write_file", Verdict: Allow}, {Tool: "write_*", Verdict: Deny}},
	}
	for name, rules := range refused {
		_, err := New(Config{Rules: rules})
		if err == nil || !strings.Contains(err.Error(), "can never") || !strings.Contains(err.Error(), "most restrictive matching rule wins") {
			t.Errorf("%s: New = %v, want it to say the allow can never apply", name, err)
		}
	}
	fine := map[string][]Rule{
		"a catch-all deny with a condition": {
			{Tool: "read_*", Verdict: Allow}, {Tool: "*", Verdict: Deny, When: []Condition{{Arg: "path", Glob: "*.env"}}}},
		"a deny of other tools": {
			{Tool: "read_*", Verdict: Allow}, {Tool: "delete_*", Verdict: Deny}},
		"denies alone": {{Tool: "*", Verdict: Deny}},
	}
	for name, rules := range fine {
		if _, err := New(Config{Rules: rules}); err != nil {
			t.Errorf("%s: New = %v", name, err)
		}
	}
}

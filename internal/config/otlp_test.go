package config

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// audit.otlp.headers take header names (with -), a later file's header
// replaces an earlier one of the same name whatever its case, and config
// show names them without their values, which may be tokens.
func TestOTLPHeadersMergeAndShowRedacted(t *testing.T) {
	a := mustParse(t, "audit:\n  otlp:\n    endpoint: https://c:4318\n    headers:\n      Authorization: Bearer one-s3cret\n      X-Scope-OrgID: team-a\n")
	b := mustParse(t, "audit:\n  otlp:\n    headers:\n      authorization: Bearer two-s3cret\n")
	s, _ := Merge(a, b)
	if got := s.Audit.OTLP; got.Endpoint != "https://c:4318" || !reflect.DeepEqual(got.Headers, []string{"authorization=Bearer two-s3cret", "X-Scope-OrgID=team-a"}) &&
		!reflect.DeepEqual(got.Headers, []string{"X-Scope-OrgID=team-a", "authorization=Bearer two-s3cret"}) {
		t.Errorf("merged %+v", got)
	}
	// The spec is written to the state dir: never with the headers.
	if j, _ := json.Marshal(s); strings.Contains(string(j), "s3cret") || !strings.Contains(string(j), "https://c:4318") {
		t.Errorf("the spec as JSON: %s", j)
	}
	var out strings.Builder
	if err := Show(&out, s, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "authorization=[redacted]") {
		t.Errorf("config show:\n%s", out.String())
	}
}

func TestOTLPHeadersBadInput(t *testing.T) {
	for name, text := range map[string]string{
		"a bare name takes nothing from the host": "audit:\n  otlp:\n    headers: [Authorization]\n",
		"a name with a space":                     "audit:\n  otlp:\n    headers:\n      \"Bad Name\": v-s3cret\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("cfg.yaml", []byte(text), SourceGlobal)
			if err == nil || !strings.Contains(err.Error(), "audit.otlp.headers") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("err %v: want one naming audit.otlp.headers, without the value", err)
			}
		})
	}
}

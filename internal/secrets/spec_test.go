package secrets

import (
	"reflect"
	"strings"
	"testing"
)

func TestSecretSpec(t *testing.T) {
	tests := []struct {
		name, flag, want string
	}{
		{"a bare name gives itself back", "TOKEN@api.x.com", "TOKEN@api.x.com"},
		{"hosts come back normalised, IPv6 in brackets", "TOKEN@API.x.com.,[::1]", "TOKEN@api.x.com,[::1]"},
		{"a source and every option come back", "K=file:/run/key@x.com:git=bot:body:prefix=sk-", "K=file:/run/key@x.com:body:prefix=sk-:git=bot"},
		{"the default git user is written :git", "K=cmd:pass show x@y@x.com:git", "K=cmd:pass show x@y@x.com:git"},
		{"a github-app source keeps its text", "T=github-app:app=1;installation=2;key=/k.pem;repos=o/r@github.com:git",
			"T=github-app:app=1;installation=2;key=/k.pem;repos=o/r@github.com:git"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := ParseSpec(tt.flag)
			if err != nil {
				t.Fatal(err)
			}
			if got := sp.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			again, err := ParseSpec(sp.String())
			if err != nil || !reflect.DeepEqual(again, sp) {
				t.Fatalf("ParseSpec(String()) = %+v, %v; want %+v", again, err, sp)
			}
		})
	}
}

func TestSecretSpecReadsNothing(t *testing.T) {
	// Checking a flag never runs its command or reads its file: the spec
	// holds no value, and a mistyped host fails before anything runs.
	sp, err := ParseSpec("K=cmd:exit 1@x.com")
	if err != nil {
		t.Fatal(err)
	}
	if sp.Kind != "cmd" || sp.Arg != "exit 1" {
		t.Fatalf("spec = %+v", sp)
	}
	ran := false
	src := Sources{RunCmd: func(string) ([]byte, error) { ran = true; return []byte("cmd-REAL-55555"), nil }}
	if _, err := ParseSpec("K=cmd:x@http://x.com"); err == nil {
		t.Fatal("a URL after @ was accepted")
	}
	if ran {
		t.Fatal("ParseSpec ran the command")
	}
	s, err := sp.Open(src)
	if err != nil || !ran || string(s.val()) != "cmd-REAL-55555" {
		t.Fatalf("Open: %v (ran %v)", err, ran)
	}
}

func TestEnvSpecIsTheFlagItReplaces(t *testing.T) {
	sp, err := EnvSpec("ANTHROPIC_API_KEY", "CLAUDE_KEY", []string{"API.anthropic.com"}, "sk-ant-api03-")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseSpec("ANTHROPIC_API_KEY=env:CLAUDE_KEY@api.anthropic.com:prefix=sk-ant-api03-")
	if err != nil || !reflect.DeepEqual(sp, want) {
		t.Fatalf("EnvSpec = %+v, want %+v (%v)", sp, want, err)
	}
	if _, err := EnvSpec("BAD NAME", "X", []string{"x.com"}, ""); err == nil || !strings.Contains(err.Error(), "--secret BAD NAME") {
		t.Fatalf("a bad name: %v", err)
	}
}

// FuzzParseSpec: whatever ParseSpec accepts, String gives back in a form
// that parses to the same spec, and ParseSpec refuses what ParseFlag does.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"TOKEN@api.x.com", "K=file:/a@b@[::1]:body", "K=cmd:x@y.com:prefix=a-:git=u", "T=github-app:app=1;installation=2;key=/k;repos=o/r@github.com", "A=env:B@*.x.com:443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, flag string) {
		sp, err := ParseSpec(flag)
		if _, ferr := ParseFlag(flag, Sources{}); err != nil && (ferr == nil || ferr.Error() != err.Error()) {
			t.Fatalf("ParseSpec: %v; ParseFlag: %v", err, ferr)
		}
		if err != nil {
			return
		}
		again, err := ParseSpec(sp.String())
		if err != nil || !reflect.DeepEqual(again, sp) {
			t.Fatalf("%q: ParseSpec(%q) = %+v, %v; want %+v", flag, sp.String(), again, err, sp)
		}
	})
}

package secrets

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRotatingSecretSwapsTheCurrentValueAndRedactsOldOnes(t *testing.T) {
	s, r, err := NewRotating("LOGIN", []byte("access-ONE-1111"), []string{"api.x.com"}, "sk-ant-oat01-")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Placeholder, "sk-ant-oat01-"+Marker) {
		t.Fatalf("placeholder %q lacks its prefix", s.Placeholder)
	}
	set, err := NewSet(s)
	if err != nil {
		t.Fatal(err)
	}
	swap := func() string {
		t.Helper()
		v, _, err := set.SwapHeader("api.x.com", "Bearer "+s.Placeholder)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := swap(); got != "Bearer access-ONE-1111" {
		t.Fatalf("before rotating, swapped to %q", got)
	}
	if err := r.Rotate([]byte("access-TWO-2222")); err != nil {
		t.Fatal(err)
	}
	if got := swap(); got != "Bearer access-TWO-2222" {
		t.Fatalf("after rotating, swapped to %q; the Set must use the current value", got)
	}
	body, err := io.ReadAll(set.Redact(strings.NewReader("old access-ONE-1111 new access-TWO-2222")))
	if err != nil {
		t.Fatal(err)
	}
	want := "old " + s.Placeholder + " new " + s.Placeholder
	if string(body) != want {
		t.Fatalf("Redact = %q, want both the old and the new value redacted", body)
	}
	if got := set.RedactString("x access-ONE-1111"); got != "x "+s.Placeholder {
		t.Fatalf("RedactString = %q", got)
	}
	if !set.Leaks([]byte("..access-ONE-1111..")) {
		t.Fatal("Leaks misses a retired value")
	}
	if _, _, err := set.SwapHeader("evil.com", "Bearer "+s.Placeholder); err == nil {
		t.Fatal("a rotated secret's placeholder went to a host it is not bound to")
	}
}

func TestRetiredValuesStopBeingRedactedAfterRetiredFor(t *testing.T) {
	s, r, err := NewRotating("LOGIN", []byte("access-ONE-1111"), []string{"api.x.com"}, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	r.now = func() time.Time { return now }
	set, _ := NewSet(s)
	if err := r.Rotate([]byte("access-TWO-2222")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(RetiredFor + time.Second)
	if got := set.RedactString("access-ONE-1111"); got != "access-ONE-1111" {
		t.Fatalf("a value retired longer than RetiredFor is still redacted: %q", got)
	}
}

func TestRotatorKeepsABoundedNumberOfRetiredValues(t *testing.T) {
	_, r, err := NewRotating("LOGIN", []byte("access-0000"), []string{"api.x.com"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3*maxRetired; i++ {
		if err := r.Rotate([]byte(fmt.Sprintf("access-%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.previous()); n != maxRetired {
		t.Fatalf("%d retired values kept, want %d", n, maxRetired)
	}
}

func TestRotateRefusesValuesThatCannotBeCredentials(t *testing.T) {
	s, r, err := NewRotating("LOGIN", []byte("access-ONE-1111"), []string{"api.x.com"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"an empty value":         "",
		"a 3-byte value":         "abc",
		"a value with a newline": "access\r\nX-Evil: 1",
		"the placeholder itself": s.Placeholder,
	} {
		if err := r.Rotate([]byte(v)); err == nil {
			t.Errorf("Rotate accepted %s", name)
		} else {
			assertNoValue(t, "Rotate error", err.Error())
		}
	}
	if string(s.val()) != "access-ONE-1111" {
		t.Fatal("a refused Rotate changed the value")
	}
}

func TestAJWTShapedPrefixLongerThanAFlagPrefixIsAccepted(t *testing.T) {
	prefix := "eyJhbGciOiJub25lIn0." + strings.Repeat("eyJleHAiOjF9", 20) + "."
	s, _, err := NewRotating("LOGIN", []byte("access-ONE-1111"), []string{"api.x.com"}, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Placeholder, prefix+Marker) {
		t.Fatalf("placeholder %q lacks its prefix", shortPlaceholder(s.Placeholder))
	}
	if _, err := NewSet(s); err != nil {
		t.Fatal(err)
	}
	if str := s.String(); len(str) > 80 || !strings.Contains(str, Marker) {
		t.Fatalf("String() = %q: want it short, with the marker", str)
	}
	if _, _, err := NewRotating("LOGIN", []byte("access-ONE-1111"), []string{"api.x.com"}, "a/b"+prefix); err == nil {
		t.Fatal("a long prefix with a reserved character was accepted")
	}
}

func TestNothingPrintsARotatingValue(t *testing.T) {
	s, r, err := NewRotating("LOGIN", []byte("tok-REAL-1234567890"), []string{"api.x.com"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Rotate([]byte("other-REAL-abcdef")); err != nil {
		t.Fatal(err)
	}
	set, _ := NewSet(s)
	j, _ := json.Marshal(s)
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "s", s, "r", r)
	for _, out := range []string{
		fmt.Sprintf("%v %+v %#v %s %q %x", s, s, s, s, s, s),
		fmt.Sprintf("%v %+v %#v %s %q %x", *s, *s, *s, *s, *s, *s),
		fmt.Sprintf("%v %+v %#v %s %q %x", r, r, r, r, r, r),
		fmt.Sprintf("%v %#v", set, set),
		string(j), logged.String(),
	} {
		assertNoValue(t, "printout", out)
	}
}

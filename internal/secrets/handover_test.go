package secrets

import (
	"bytes"
	"strings"
	"testing"
)

func TestHandoverKeepsPlaceholdersAndValues(t *testing.T) {
	a, err := New("API_KEY", []byte("sk-real-value-0123456789"), []string{"api.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteHandover(&b, []*Secret{a}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHandover(&b)
	if err != nil || len(got) != 1 {
		t.Fatalf("ReadHandover = %v, %v", got, err)
	}
	g := got[0]
	if g.Name != a.Name || g.Placeholder != a.Placeholder || string(g.val()) != "sk-real-value-0123456789" || len(g.Hosts) != 1 {
		t.Fatalf("handed over %+v, want %+v", g, a)
	}
}

func TestHandoverRefusesWhatIsNoSecret(t *testing.T) {
	for name, in := range map[string]string{
		"a placeholder without the marker": `[{"name":"K","hosts":["a.example"],"placeholder":"plain","value":"c2stdmFsdWUtMDEyMzQ1"}]`,
		"a bad name":                       `[{"name":"1 K","hosts":["a.example"],"placeholder":"airlock-ph-x","value":"c2stdmFsdWUtMDEyMzQ1"}]`,
		"no hosts":                         `[{"name":"K","hosts":[],"placeholder":"airlock-ph-x","value":"c2stdmFsdWUtMDEyMzQ1"}]`,
		"not JSON":                         `nope`,
	} {
		if got, err := ReadHandover(strings.NewReader(in)); err == nil {
			t.Errorf("%s: ReadHandover = %v, want an error", name, got)
		}
	}
	r, _, err := NewRotating("TOKEN", []byte("tok-0123456789abcdef"), []string{"api.example.com"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteHandover(&bytes.Buffer{}, []*Secret{r}); err == nil {
		t.Error("a rotating secret was handed over")
	}
}

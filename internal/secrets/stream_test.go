package secrets

import (
	"errors"
	"testing"
)

func TestRedactStreamKeepsPieceBoundariesAndNeverLetsAValueThroughWhole(t *testing.T) {
	const v = "sk-stream-value-1234"
	sec, err := New("K", []byte(v), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := NewSet(sec)
	ph := sec.Placeholder
	tests := map[string]struct {
		pieces [][]string // messages, each a list of pushes
		want   []string   // what each message comes out as
	}{
		"a value inside one push":          {[][]string{{"a " + v + " b"}}, []string{"a " + ph + " b"}},
		"a value split over pushes":        {[][]string{{"a sk-st", "ream-val", "ue-1234 b"}}, []string{"a " + ph + " b"}},
		"a message ending like a value":    {[][]string{{"ends sk-str"}, {"other"}}, []string{"ends sk-str", "other"}},
		"a value split over two messages":  {[][]string{{"x sk-stream"}, {"-value-1234 y"}}, []string{"x sk-stream", ph + " y"}},
		"a split value finished in pieces": {[][]string{{"sk-"}, {"stream-", "value-1234", "!"}}, []string{"sk-", ph + "!"}},
		"nothing secret":                   {[][]string{{"plain ", "text"}}, []string{"plain text"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			st := set.RedactStream()
			for i, msg := range tt.pieces {
				var out []byte
				for _, p := range msg {
					if out, err = st.Push(out, []byte(p)); err != nil {
						t.Fatal(err)
					}
				}
				if out, err = st.Flush(out); err != nil {
					t.Fatal(err)
				}
				if string(out) != tt.want[i] {
					t.Errorf("message %d = %q, want %q", i, out, tt.want[i])
				}
			}
		})
	}
}

func TestSwapStreamSwapsBodySecretsAndRefusesOtherHostsPlaceholders(t *testing.T) {
	mine, _ := New("MINE", []byte("mine-value"), []string{"example.com"})
	mine.InBody = true
	other, _ := New("OTHER", []byte("other-value"), []string{"other.test"})
	set, err := NewSet(mine, other)
	if err != nil {
		t.Fatal(err)
	}
	st := set.SwapStream("example.com")
	p := mine.Placeholder
	out, err := st.Push(nil, []byte("k="+p[:10]))
	if err == nil {
		out, err = st.Push(out, []byte(p[10:]+";"))
	}
	if err == nil {
		out, err = st.Flush(out)
	}
	if err != nil || string(out) != "k=mine-value;" {
		t.Fatalf("swap = %q, %v", out, err)
	}
	_, err = set.SwapStream("example.com").Push(nil, []byte("x "+other.Placeholder+" y"))
	var leak *LeakError
	if !errors.As(err, &leak) || leak.Secret != "OTHER" {
		t.Fatalf("another host's placeholder: %v, want a LeakError", err)
	}
	if set.SwapStream("example.com") == nil || (*Set)(nil).SwapStream("x") != nil || (*Set)(nil).RedactStream() != nil {
		t.Fatal("nil streams")
	}
}

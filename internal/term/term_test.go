package term

import (
	"os"
	"testing"
)

func TestPrintableReplacesEveryControlCharacter(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.com":       "api.example.com",
		"evil\x1b[2J.test":      "evil?[2J.test",
		"a\r\nb\tc\x7f":         "a??b?c?",
		"c1\u009b31m":           "c1?31m",
		"unicode ünïcødé stays": "unicode ünïcødé stays",
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSizeOfANonTerminalIsZero(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if r, c := Size(f); r != 0 || c != 0 {
		t.Errorf("Size(file) = %dx%d, want 0x0", r, c)
	}
	if IsTerminal(f) {
		t.Error("a file is not a terminal")
	}
}

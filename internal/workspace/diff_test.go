package workspace

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiffScriptRebuildsTheNewText(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for iter := 0; iter < 500; iter++ {
		x := randLines(r, r.Intn(30))
		y := mutate(r, x)
		ops := diffLines(x, y)
		var gotA, gotB []string
		for _, o := range ops {
			switch o.kind {
			case ' ':
				gotA = append(gotA, x[o.i])
				gotB = append(gotB, x[o.i])
			case '-':
				gotA = append(gotA, x[o.i])
			case '+':
				gotB = append(gotB, y[o.i])
			}
		}
		if strings.Join(gotA, "") != strings.Join(x, "") || strings.Join(gotB, "") != strings.Join(y, "") {
			t.Fatalf("diffLines(%q, %q) = %v: does not rebuild both sides", x, y, ops)
		}
	}
}

func randLines(r *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = string(rune('a'+r.Intn(4))) + "\n"
	}
	return out
}

func mutate(r *rand.Rand, x []string) []string {
	y := append([]string(nil), x...)
	for k := r.Intn(5); k > 0; k-- {
		switch i := r.Intn(len(y) + 1); r.Intn(3) {
		case 0:
			y = append(y[:i], append([]string{"new\n"}, y[i:]...)...)
		case 1:
			if i < len(y) {
				y = append(y[:i], y[i+1:]...)
			}
		case 2:
			if i < len(y) {
				y[i] = "changed\n"
			}
		}
	}
	return y
}

// The output applies with patch(1), the reference reader of unified diffs.
func TestUnifiedDiffAppliesWithPatch(t *testing.T) {
	if _, err := exec.LookPath("patch"); err != nil {
		t.Skip("patch not installed")
	}
	r := rand.New(rand.NewSource(2))
	dir := t.TempDir()
	for iter := 0; iter < 40; iter++ {
		x := randLines(r, 5+r.Intn(40))
		y := mutate(r, x)
		a, b := []byte(strings.Join(x, "")), []byte(strings.Join(y, ""))
		if iter%5 == 0 {
			b = append(b, "no newline"...)
		}
		var d bytes.Buffer
		if err := WriteUnified(&d, a, b, "a/f", "b/f"); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "f")
		os.WriteFile(f, a, 0o644)
		c := exec.Command("patch", "-s", "--no-backup-if-mismatch", f)
		c.Stdin = &d
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("patch: %v %s\ndiff:\n%s", err, out, d.String())
		}
		if got, _ := os.ReadFile(f); !bytes.Equal(got, b) {
			t.Fatalf("patched file differs:\n%q\nwant\n%q\ndiff:\n%s", got, b, d.String())
		}
	}
}

func TestUnifiedDiffShape(t *testing.T) {
	var d bytes.Buffer
	WriteUnified(&d, []byte("a\nb\nc\n"), []byte("a\nB\nc\nd\n"), "a/x", "b/x")
	want := "--- a/x\n+++ b/x\n@@ -1,3 +1,4 @@\n a\n-b\n+B\n c\n+d\n"
	if d.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", d.String(), want)
	}
}

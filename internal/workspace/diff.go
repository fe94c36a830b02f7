package workspace

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MaxDiffBytes bounds a file shown as a text diff; larger ones are shown
// by size and hash, as binaries are.
const MaxDiffBytes = 4 << 20

// maxEdits bounds the diff search; beyond it a file is shown as replaced.
const maxEdits = 1500

// IsText reports whether b reads as text: valid UTF-8 without NUL bytes.
func IsText(b []byte) bool {
	return !bytes.ContainsRune(b, 0) && utf8.Valid(b)
}

// WriteUnified writes a unified diff of a to b (3 lines of context) with the
// given file names, or nothing when they are equal.
func WriteUnified(w io.Writer, a, b []byte, nameA, nameB string) error {
	if bytes.Equal(a, b) {
		return nil
	}
	x, y := splitLines(a), splitLines(b)
	ops := diffLines(x, y)
	if _, err := fmt.Fprintf(w, "--- %s\n+++ %s\n", nameA, nameB); err != nil {
		return err
	}
	for _, h := range hunks(ops, 3) {
		var sb strings.Builder
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(h.aStart, h.aLen), hunkRange(h.bStart, h.bLen))
		for _, o := range h.ops {
			line := x
			if o.kind == '+' {
				line = y
			}
			l := line[o.i]
			sb.WriteByte(o.kind)
			sb.WriteString(l)
			if !strings.HasSuffix(l, "\n") {
				sb.WriteString("\n\\ No newline at end of file\n")
			}
		}
		if _, err := io.WriteString(w, sb.String()); err != nil {
			return err
		}
	}
	return nil
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// op is one line of an edit script: ' ' kept, '-' from a, '+' from b; i
// indexes a for ' ' and '-', b for '+'.
type op struct {
	kind byte
	i    int
}

// diffLines returns an edit script from x to y: Myers' algorithm on what
// lies between the common prefix and suffix, or, past maxEdits, all of x
// removed and all of y added.
func diffLines(x, y []string) []op {
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	var ops []op
	for i := 0; i < pre; i++ {
		ops = append(ops, op{' ', i})
	}
	mid := myers(x[pre:len(x)-suf], y[pre:len(y)-suf])
	for _, o := range mid {
		o.i += pre
		ops = append(ops, o)
	}
	for i := len(x) - suf; i < len(x); i++ {
		ops = append(ops, op{' ', i})
	}
	return ops
}

func myers(x, y []string) []op {
	n, m := len(x), len(y)
	replaced := func() []op {
		ops := make([]op, 0, n+m)
		for i := range x {
			ops = append(ops, op{'-', i})
		}
		for j := range y {
			ops = append(ops, op{'+', j})
		}
		return ops
	}
	if n == 0 || m == 0 {
		return replaced()
	}
	limit := min(n+m, maxEdits)
	off := limit + 1
	v := make([]int, 2*limit+3)
	var trace [][]int
	found := -1
	for d := 0; d <= limit && found < 0; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...)) // k from -d-1 to d+1
		for k := -d; k <= d; k += 2 {
			var xi int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				xi = v[off+k+1]
			} else {
				xi = v[off+k-1] + 1
			}
			yi := xi - k
			for xi < n && yi < m && x[xi] == y[yi] {
				xi++
				yi++
			}
			v[off+k] = xi
			if xi >= n && yi >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return replaced()
	}
	// Walk back through the saved frontiers: trace[d] is the frontier
	// before step d.
	var rev []op
	xi, yi := n, m
	for d := found; d > 0; d-- {
		pv := func(k int) int { return trace[d][k+d+1] }
		k := xi - yi
		pk := k - 1
		if k == -d || (k != d && pv(k-1) < pv(k+1)) {
			pk = k + 1
		}
		px := pv(pk)
		py := px - pk
		for xi > px && yi > py {
			rev = append(rev, op{' ', xi - 1})
			xi--
			yi--
		}
		if xi == px {
			rev = append(rev, op{'+', yi - 1})
			yi--
		} else {
			rev = append(rev, op{'-', xi - 1})
			xi--
		}
	}
	for xi > 0 && yi > 0 {
		rev = append(rev, op{' ', xi - 1})
		xi--
		yi--
	}
	ops := make([]op, len(rev))
	for i := range rev {
		ops[i] = rev[len(rev)-1-i]
	}
	return ops
}

type hunk struct {
	aStart, aLen, bStart, bLen int
	ops                        []op
}

// hunks groups an edit script into hunks with ctx lines of context.
func hunks(ops []op, ctx int) []hunk {
	// Positions in a and b before each op.
	type pos struct{ a, b int }
	at := make([]pos, len(ops)+1)
	for i, o := range ops {
		at[i+1] = at[i]
		switch o.kind {
		case ' ':
			at[i+1].a++
			at[i+1].b++
		case '-':
			at[i+1].a++
		case '+':
			at[i+1].b++
		}
	}
	var out []hunk
	i := 0
	for i < len(ops) {
		for i < len(ops) && ops[i].kind == ' ' {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(0, i-ctx)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			// A run of context: the hunk ends if it is longer than 2*ctx.
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		h := hunk{aStart: at[start].a, bStart: at[start].b, ops: ops[start:end]}
		h.aLen = at[end].a - at[start].a
		h.bLen = at[end].b - at[start].b
		if h.aLen == 0 {
			h.aStart = at[start].a
		}
		out = append(out, h)
		i = end
	}
	return out
}

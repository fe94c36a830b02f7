package workspace

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// DiffFormat picks what WriteDiff prints.
type DiffFormat int

const (
	DiffFull     DiffFormat = iota // unified diff for text, sizes and hashes for the rest
	DiffStat                       // one line per path with counts
	DiffNameOnly                   // paths only
)

// WriteDiff prints changes for a user. Names are quoted when they hold
// anything a terminal could misread (see Quote).
func (s *Session) WriteDiff(w io.Writer, changes []Change, f DiffFormat) error {
	return writeDiff(w, changes, f, s.reader())
}

func writeDiff(out io.Writer, changes []Change, f DiffFormat, r Reader) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	switch f {
	case DiffNameOnly:
		for _, c := range changes {
			fmt.Fprintln(w, Quote(c.Path))
		}
		return w.Flush()
	case DiffStat:
		width := 0
		for _, c := range changes {
			width = max(width, len(Quote(c.Path)))
		}
		width = min(width, 60)
		for _, c := range changes {
			fmt.Fprintf(w, " %-*s | %s%s\n", width, Quote(c.Path), statOf(c, r), riskMark(c))
		}
		n := Count(changes)
		fmt.Fprintf(w, " %s", n)
		if n.Reverted > 0 {
			fmt.Fprintf(w, ", %d reverted", n.Reverted)
		}
		if n.Risky > 0 {
			fmt.Fprintf(w, "; %d risky", n.Risky)
		}
		fmt.Fprintln(w)
		return w.Flush()
	}
	for _, c := range changes {
		writeOne(w, c, r)
	}
	return w.Flush()
}

func riskMark(c Change) string {
	switch {
	case c.Refused != "":
		return "  (refused: " + c.Refused + ")"
	case c.Risky():
		return "  (risky)"
	}
	return ""
}

func statOf(c Change, r Reader) string {
	switch c.Kind {
	case Reverted:
		return "reverted (written, then restored)"
	case ModeOnly:
		return fmt.Sprintf("mode %04o -> %04o", c.Before.Mode, c.After.Mode)
	}
	if (c.After == nil || c.After.Type == TypeDir) && (c.Before == nil || c.Before.Type == TypeDir) {
		return fmt.Sprintf("%s dir", c.Kind)
	}
	a, b, text := contents(c, r)
	if !text {
		return fmt.Sprintf("%s %s -> %s", c.Kind, sizeOf(c.Before), sizeOf(c.After))
	}
	plus, minus := 0, 0
	for _, o := range diffLines(splitLines(a), splitLines(b)) {
		switch o.kind {
		case '+':
			plus++
		case '-':
			minus++
		}
	}
	return fmt.Sprintf("%s +%d -%d", c.Kind, plus, minus)
}

func sizeOf(e *Entry) string {
	switch {
	case e == nil:
		return "-"
	case e.Type == TypeFile:
		return fmt.Sprintf("%d bytes", e.Size)
	case e.Type == TypeSymlink:
		return "link " + Quote(e.Link)
	}
	return e.Type.String()
}

// contents reads both sides when both are text files small enough to diff.
func contents(c Change, r Reader) (a, b []byte, text bool) {
	isFile := func(e *Entry) bool { return e == nil || (e.Type == TypeFile && e.Size <= MaxDiffBytes) }
	if !isFile(c.Before) || !isFile(c.After) || (c.Before == nil && c.After == nil) {
		return nil, nil, false
	}
	var err error
	if a, err = r.Before(c); err != nil {
		return nil, nil, false
	}
	if b, err = r.After(c); err != nil {
		return nil, nil, false
	}
	// Diff only what still is what was reviewed (the host may have moved on).
	if c.Before != nil && sha(a) != c.Before.SHA256 || c.After != nil && sha(b) != c.After.SHA256 {
		return nil, nil, false
	}
	return a, b, IsText(a) && IsText(b)
}

func sha(b []byte) string {
	s, _, _ := hashReader(bytes.NewReader(b))
	return s
}

func writeOne(w io.Writer, c Change, r Reader) {
	p := Quote(c.Path)
	fmt.Fprintf(w, "diff --airlock a/%s b/%s\n", strings.Trim(p, `"`), strings.Trim(p, `"`))
	for _, why := range c.Risks {
		fmt.Fprintf(w, "# risky: %s\n", why)
	}
	if c.Refused != "" {
		fmt.Fprintf(w, "# refused: %s\n", c.Refused)
	}
	switch c.Kind {
	case Created:
		fmt.Fprintf(w, "new %s mode %06o\n", c.After.Type, modeBits(c.After))
	case Deleted:
		fmt.Fprintf(w, "deleted %s mode %06o\n", c.Before.Type, modeBits(c.Before))
	case ModeOnly:
		fmt.Fprintf(w, "old mode %06o\nnew mode %06o\n", modeBits(c.Before), modeBits(c.After))
		return
	case Reverted:
		fmt.Fprintf(w, "# reverted: written by the sandbox, then restored to its old content\n")
		return
	case Modified:
		if c.Before.Mode != c.After.Mode || c.Before.Type != c.After.Type {
			fmt.Fprintf(w, "old mode %06o\nnew mode %06o\n", modeBits(c.Before), modeBits(c.After))
		}
	}
	if c.After != nil && c.After.Type == TypeDir || c.Before != nil && c.Before.Type == TypeDir && c.After == nil {
		return
	}
	a, b, text := contents(c, r)
	if text {
		from, to := "a/"+strings.Trim(p, `"`), "b/"+strings.Trim(p, `"`)
		if c.Before == nil {
			from = "/dev/null"
		}
		if c.After == nil {
			to = "/dev/null"
		}
		WriteUnified(w, a, b, from, to)
		return
	}
	fmt.Fprintf(w, "%s: %s -> %s\n", binaryLabel(c), describe(c.Before), describe(c.After))
}

func binaryLabel(c Change) string {
	for _, e := range []*Entry{c.Before, c.After} {
		if e != nil && e.Type == TypeSymlink {
			return "symlink"
		}
	}
	return "binary or unreadable"
}

func describe(e *Entry) string {
	switch {
	case e == nil:
		return "(none)"
	case e.Type == TypeFile:
		sum := e.SHA256
		if len(sum) > 16 {
			sum = sum[:16]
		}
		return fmt.Sprintf("%d bytes sha256 %s", e.Size, sum)
	case e.Type == TypeSymlink:
		return "-> " + Quote(e.Link)
	case e.Type == TypeOther:
		return e.Other
	}
	return e.Type.String()
}

func modeBits(e *Entry) uint32 {
	t := uint32(0o100000)
	switch e.Type {
	case TypeDir:
		t = 0o040000
	case TypeSymlink:
		t = 0o120000
	}
	return t | e.Mode
}

package workspace

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// SplitRisky separates changes an apply may carry without asking from the
// risky ones, which need an explicit yes. Reverted and refused changes go
// in neither.
func SplitRisky(cs []Change) (plain, risky []Change) {
	for _, c := range cs {
		switch {
		case !c.Applicable():
		case c.Risky():
			risky = append(risky, c)
		default:
			plain = append(plain, c)
		}
	}
	return plain, risky
}

// WriteFindings lists risky, refused and reverted changes, one per line,
// each with its reason.
func WriteFindings(w io.Writer, prefix string, cs []Change) {
	for _, c := range cs {
		switch {
		case c.Refused != "":
			fmt.Fprintf(w, "%srefused %s: %s\n", prefix, Quote(c.Path), c.Refused)
		case c.Risky():
			fmt.Fprintf(w, "%srisky %s %s: %s\n", prefix, c.Kind, Quote(c.Path), strings.Join(c.Risks, "; "))
		case c.Kind == Reverted:
			fmt.Fprintf(w, "%snote: %s was written, then restored to its old content\n", prefix, Quote(c.Path))
		}
	}
}

// WriteResult reports an apply.
func WriteResult(w io.Writer, prefix, root string, res ApplyResult) {
	if len(res.Applied) > 0 {
		fmt.Fprintf(w, "%sapplied %s to %s\n", prefix, Count(res.Applied), root)
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "%snot applied %s: %s\n", prefix, Quote(s.Path), s.Why)
	}
}

// Ask prints question and reads one answer from in: the first letter of
// the line, lower-cased; "" for an empty line or end of input.
func Ask(in *bufio.Reader, out io.Writer, question string) string {
	fmt.Fprint(out, question)
	line, err := in.ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(out)
		return ""
	}
	line = strings.ToLower(strings.TrimSpace(line))
	if line == "" {
		return ""
	}
	return line[:1]
}

// Interactive walks a user through applying: the findings, then
// "Apply ... to DIR? [y/N/d]" (d shows the diff and asks again), then, if
// any, "Also apply N risky changes? [y/N]". It returns the result, or
// ok=false when the user declined.
func (s *Session) Interactive(in io.Reader, out, diffOut io.Writer, prefix string, cs []Change) (res ApplyResult, ok bool, err error) {
	plain, risky := SplitRisky(cs)
	if len(plain)+len(risky) == 0 {
		return res, false, nil
	}
	r := bufio.NewReader(in)
	WriteFindings(out, prefix, cs)
	for {
		a := Ask(r, out, fmt.Sprintf("%sApply %s to %s? [y/N/d] ", prefix, Count(append(append([]Change(nil), plain...), risky...)), s.Root()))
		switch a {
		case "d":
			if err := s.WriteDiff(diffOut, cs, DiffFull); err != nil {
				return res, false, err
			}
			continue
		case "y":
		default:
			return res, false, nil
		}
		break
	}
	todo := plain
	if len(risky) > 0 {
		if Ask(r, out, fmt.Sprintf("%sAlso apply the %d risky change(s) listed above? [y/N] ", prefix, len(risky))) == "y" {
			todo = append(todo, risky...)
		}
	}
	res, err = s.Apply(todo)
	return res, true, err
}

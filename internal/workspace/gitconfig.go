package workspace

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// GitConfigVar is one variable of a git config file: Key is
// section[.subsection].name with section and name lower-cased, as git
// compares them; the subsection keeps its case.
type GitConfigVar struct {
	Key, Value string
}

// ParseGitConfig reads git's config syntax: [section], [section "sub"],
// the old [section.sub], name = value, a bare name (true), ; and # comments,
// quotes, backslash escapes and continuation lines. It is lenient where git
// is lenient and reports the line of what git itself would refuse, since a
// config git cannot read may still be one a later git version reads.
func ParseGitConfig(b []byte) ([]GitConfigVar, error) {
	var out []GitConfigVar
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		// Continuation lines: a value ending in an unescaped backslash.
		for strings.HasSuffix(line, "\\") && !strings.HasSuffix(line, "\\\\") && sc.Scan() {
			lineNo++
			line = line[:len(line)-1] + sc.Text()
		}
		s := strings.TrimLeft(line, " \t")
		if s == "" || s[0] == '#' || s[0] == ';' {
			continue
		}
		if s[0] == '[' {
			end := sectionEnd(s)
			if end < 0 {
				return out, fmt.Errorf("line %d: unterminated section header", lineNo)
			}
			hdr, err := parseSectionHeader(s[1:end])
			if err != nil {
				return out, fmt.Errorf("line %d: %v", lineNo, err)
			}
			section = hdr
			s = strings.TrimLeft(s[end+1:], " \t")
			if s == "" || s[0] == '#' || s[0] == ';' {
				continue
			}
		}
		if section == "" {
			return out, fmt.Errorf("line %d: variable outside any section", lineNo)
		}
		name, rest, hasValue := strings.Cut(s, "=")
		name = strings.TrimRight(name, " \t")
		if !hasValue {
			// "name" alone, maybe followed by a comment.
			name = strings.TrimRight(strings.SplitN(strings.SplitN(name, "#", 2)[0], ";", 2)[0], " \t")
		}
		if !validVarName(name) {
			return out, fmt.Errorf("line %d: bad variable name %q", lineNo, name)
		}
		v := GitConfigVar{Key: section + "." + strings.ToLower(name), Value: "true"}
		if hasValue {
			v.Value = unquoteGitValue(rest)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("line %d: %v", lineNo+1, err)
	}
	return out, nil
}

// sectionEnd finds the ']' closing a header, skipping quoted subsections.
func sectionEnd(s string) int {
	inQuote, esc := false, false
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case esc:
			esc = false
		case c == '\\' && inQuote:
			esc = true
		case c == '"':
			inQuote = !inQuote
		case c == ']' && !inQuote:
			return i
		}
	}
	return -1
}

func parseSectionHeader(h string) (string, error) {
	name, sub, hasSub := strings.Cut(h, " ")
	if !hasSub {
		name, sub, hasSub = strings.Cut(h, "\t")
	}
	if hasSub {
		sub = strings.TrimSpace(sub)
		if len(sub) < 2 || sub[0] != '"' || sub[len(sub)-1] != '"' {
			return "", fmt.Errorf("bad subsection in [%s]", h)
		}
		var b strings.Builder
		for i := 1; i < len(sub)-1; i++ {
			if sub[i] == '\\' && i+1 < len(sub)-1 {
				i++
			}
			b.WriteByte(sub[i])
		}
		if !validSectionName(name) {
			return "", fmt.Errorf("bad section name %q", name)
		}
		return strings.ToLower(name) + "." + b.String(), nil
	}
	// [section] or the deprecated [section.subsection].
	sec, old, dotted := strings.Cut(h, ".")
	if !validSectionName(sec) {
		return "", fmt.Errorf("bad section name %q", sec)
	}
	if dotted {
		return strings.ToLower(sec) + "." + strings.ToLower(old), nil
	}
	return strings.ToLower(sec), nil
}

func validSectionName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func validVarName(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// unquoteGitValue strips quotes, comments and escapes from a value.
func unquoteGitValue(s string) string {
	s = strings.TrimLeft(s, " \t")
	var b strings.Builder
	inQuote := false
	pendingSpace := ""
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			inQuote = !inQuote
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteString(pendingSpace)
			pendingSpace = ""
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			default:
				b.WriteByte(s[i])
			}
			continue
		case !inQuote && (c == '#' || c == ';'):
			return b.String()
		case !inQuote && (c == ' ' || c == '\t'):
			pendingSpace += string(c)
			continue
		default:
			b.WriteString(pendingSpace)
			pendingSpace = ""
			b.WriteByte(c)
			continue
		}
		b.WriteString(pendingSpace)
		pendingSpace = ""
	}
	return b.String()
}

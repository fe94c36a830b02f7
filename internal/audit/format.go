package audit

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"
)

const (
	ansiRefusal = "\x1b[1;31m" // bold red
	ansiAsk     = "\x1b[33m"   // yellow
	ansiAllow   = "\x1b[2m"    // dim
	ansiReset   = "\x1b[0m"
)

// Format renders one record for a terminal: time (local, HH:MM:SS.mmm), kind, decision,
// what it concerns (subject/method/path/status; for exec the command line, exit code and
// duration; for file and workspace the op and path or counts; for lifecycle the op and
// backend), rule/reason, and "(×N since HH:MM:SS.mmm)" for N aggregated repeats; with color, deny/secret_blocked/error in red
// and bold, ask in yellow, allow dim; without color, a refusal is prefixed "DENY " (an
// error "ERR  ", anything else five spaces, to keep columns) so it stands out in plain
// text too. Text from the sandbox is escaped: it must not drive the operator's terminal.
func Format(r Record, color bool) string {
	var b strings.Builder
	if !color {
		switch {
		case refusal(r.Decision):
			b.WriteString("DENY ")
		case r.Decision == "error":
			b.WriteString("ERR  ")
		default:
			b.WriteString("     ")
		}
	}
	b.WriteString(r.Time.Local().Format("15:04:05.000"))
	fmt.Fprintf(&b, " %-9s %-7s", clean(r.Kind), clean(r.Decision))

	subject := r.Subject
	if subject == "" {
		subject = r.Host
		if subject == "" {
			subject = r.IP
		}
		if subject != "" && r.Port != 0 {
			subject = net.JoinHostPort(subject, strconv.Itoa(r.Port))
		}
	}
	parts := []string{subject, r.Method, r.Path}
	switch r.Kind {
	case KindDNS: // name, query type, and the synthetic address answered
		parts = []string{r.Host, r.Extra["qtype"]}
		if r.IP != "" {
			parts = append(parts, "-> "+r.IP)
		}
	case KindExec:
		if len(r.Argv) > 0 {
			parts = []string{quoteArgv(r.Argv)}
		}
		if r.ExitCode != nil {
			parts = append(parts, "exit "+strconv.Itoa(*r.ExitCode))
		}
	case KindFile:
		parts = []string{r.Op, r.Path}
	case KindWorkspace:
		parts = []string{r.Op, subject}
		if r.Added != 0 || r.Modified != 0 || r.Deleted != 0 {
			parts = append(parts, fmt.Sprintf("+%d ~%d -%d", r.Added, r.Modified, r.Deleted))
		}
	case KindLifecycle:
		parts = []string{r.Op, subject, r.Backend}
	case KindAudit:
		parts = []string{subject}
	case KindInbound: // who came in, where, and to which port inside
		parts = []string{r.Extra["peer"], "->", r.Extra["listen"], "-> sandbox:" + strconv.Itoa(r.Port)}
		if r.BytesIn != 0 || r.BytesOut != 0 {
			parts = append(parts, fmt.Sprintf("in %d out %d bytes", r.BytesIn, r.BytesOut))
		}
	case KindLLM: // model, request, and what the answer cost
		parts = []string{r.Host, subject, r.Method, r.Path}
		if t := r.Extra["tokens"]; t != "" {
			parts = append(parts, t+" tokens")
		}
		if u := r.Extra["usd"]; u != "" {
			parts = append(parts, "$"+u)
		}
		if t := r.Extra["total_tokens"]; t != "" {
			parts = append(parts, "(sandbox: "+t+" tokens, $"+r.Extra["total_usd"]+")")
		}
	}
	for _, s := range parts {
		if s != "" {
			b.WriteString(" " + clean(s))
		}
	}
	if r.Status != 0 {
		b.WriteString(" " + strconv.Itoa(r.Status))
	}
	if r.Kind == KindExec && r.Duration != 0 {
		b.WriteString(" " + r.Duration.Duration().Round(time.Millisecond).String())
	}
	if r.Rule != "" {
		b.WriteString(" [" + clean(r.Rule) + "]")
	}
	if r.Reason != "" {
		b.WriteString(" " + clean(r.Reason))
	}
	if r.Count > 0 && r.Kind != KindAudit { // an audit record's reason already says it
		fmt.Fprintf(&b, " (×%d", r.Count)
		if !r.Since.IsZero() {
			b.WriteString(" since " + r.Since.Local().Format("15:04:05.000"))
		}
		b.WriteString(")")
	}

	line := strings.TrimRight(b.String(), " ")
	if !color {
		return line
	}
	switch {
	case refusal(r.Decision) || r.Decision == "error":
		return ansiRefusal + line + ansiReset
	case r.Decision == "ask":
		return ansiAsk + line + ansiReset
	case r.Decision == "allow":
		return ansiAllow + line + ansiReset
	}
	return line
}

// UseColor reports whether Format should color output for f: a terminal, and the
// user has not opted out with NO_COLOR or TERM=dumb.
func UseColor(f *os.File) bool {
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// quoteArgv joins argv as a shell would read it back, quoting what needs it.
func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./=:,+@%", r))
		}) {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func refusal(decision string) bool {
	switch decision {
	case "deny", "secret_blocked":
		return true
	}
	return false
}

// clean escapes control and invisible formatting characters (escape sequences, bidi
// overrides) and invalid UTF-8, since subjects and paths come from the sandbox.
func clean(s string) string {
	ok := true
	for _, r := range s {
		if needsEscape(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && needsEscape(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

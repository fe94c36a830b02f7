package supervisor

import (
	"fmt"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/term"
)

// A foreground --ask run asks on its own terminal: each key below answers
// the request shown (PromptKeys documents them). The other surfaces
// (airlock approve, the web page, RPC) answer the same queue: whichever
// answers first wins, and the prompt goes when another one did.
const (
	keysLegend  = "a allow once, s/p/g allow for the session/project/everywhere; d deny once, S/P/G deny for the session/project/everywhere; Enter: leave it to airlock approvals or airlock ui"
	shortLegend = "a/s/p/g allow once/session/project/global, d/S/P/G deny, Enter later"
	// maxPromptShown bounds what a line prompt shows; a request longer
	// than that is not offered for allowing there: a human allows only
	// what they were shown whole.
	maxPromptShown = 4 << 10
)

// keyDecision maps a key to a decision; later says the user left it to
// another surface.
func keyDecision(k byte) (d approval.Decision, ok, later bool) {
	d.By = "terminal"
	switch k {
	case 'a':
		d.Allow, d.Scope = true, approval.Once
	case 's':
		d.Allow, d.Scope = true, approval.Session
	case 'p':
		d.Allow, d.Scope = true, approval.Project
	case 'g':
		d.Allow, d.Scope = true, approval.Global
	case 'd', 'D':
		d.Scope = approval.Once
	case 'S':
		d.Scope = approval.Session
	case 'P':
		d.Scope = approval.Project
	case 'G':
		d.Scope = approval.Global
	case '\r', '\n', 0x1b, 0x03:
		return d, false, true
	default:
		return d, false, false
	}
	return d, true, false
}

// what is a request as the prompt shows it: escaped (a host name or a
// command from the sandbox may hold terminal escapes), whole or not at all.
func what(r approval.Request) (text string, whole bool) {
	kind := r.Kind
	if kind == "" {
		kind = approval.KindNetwork
	}
	s := r.Subject
	if r.Detail != "" {
		s += " " + r.Detail
	}
	if len(s) > maxPromptShown {
		return fmt.Sprintf("%s request %s (%d bytes: too long to show here)", kind, term.Printable(r.ID), len(s)), false
	}
	// Each line escaped; a line prompt shows them one under the other.
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = term.Printable(l)
	}
	return fmt.Sprintf("%s %s", kind, strings.Join(lines, "\r\n    ")), true
}

// surface is where the prompt shows: a line on stderr (no -t), or the
// status row over a -t command's screen.
type surface interface {
	// show puts the prompt up (again), and takes keys until hide.
	show(text string)
	hide()
	// note tells the user something in passing.
	note(text string)
	// keys are what the user typed while the prompt was up; opened, for
	// a surface where the user opens the prompt (the ask keys), fires then.
	keys() <-chan byte
	opened() <-chan struct{}
	// width is how much of a line the prompt may take (0: no limit).
	width() int
}

// prompter shows the queue's requests on a surface, one at a time.
type prompter struct {
	q      control.Approvals
	s      surface
	auto   bool   // a request shows as it comes (a line); else when opened
	sbName string // the sandbox, as the prompt names it
}

func (p *prompter) run(events <-chan approval.Event) {
	var (
		pending []approval.Request
		later   = map[string]bool{} // left to another surface
		shown   approval.Request    // what the prompt shows; ID "" for none
		allowOK bool
	)
	next := func() {
		for _, r := range pending {
			if later[r.ID] {
				continue
			}
			text, whole := what(r)
			allowOK = whole
			legend := keysLegend
			if w := p.s.width(); w > 0 {
				legend = shortLegend
			}
			if !whole {
				legend = "d/S/P/G deny; Enter: leave it to airlock approvals or airlock ui"
			}
			msg := fmt.Sprintf("airlock: sandbox %s asks for %s — %s? ", p.sbName, text, legend)
			if w := p.s.width(); w > 0 && len([]rune(msg)) > w {
				// Not all of it fits the row: what is not shown whole is
				// not offered for allowing.
				allowOK = false
				msg = truncate(fmt.Sprintf("airlock: d/S/P/G deny, Enter later (too long for this row: airlock approvals shows it) — %s", text), w)
			}
			shown = r
			p.s.show(msg)
			return
		}
		if shown.ID != "" {
			shown = approval.Request{}
			p.s.hide()
		}
	}
	// A subscriber that fell behind misses events: what the prompt shows
	// is checked against the queue now and then.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if len(pending) == 0 {
				continue
			}
			live := map[string]bool{}
			for _, r := range p.q.Pending() {
				live[r.ID] = true
			}
			kept := pending[:0]
			for _, r := range pending {
				if live[r.ID] {
					kept = append(kept, r)
				} else {
					delete(later, r.ID)
				}
			}
			pending = kept
			if shown.ID != "" && !live[shown.ID] {
				p.s.hide()
				shown = approval.Request{}
				p.s.note("airlock: the request was answered elsewhere")
				next()
			}
		case e, ok := <-events:
			if !ok {
				if shown.ID != "" {
					p.s.hide()
				}
				return
			}
			switch e.Type {
			case "request":
				pending = append(pending, e.Request)
				if p.auto && shown.ID == "" {
					next()
				} else if !p.auto && shown.ID == "" {
					p.s.note("") // a bell: the ask keys open the prompt
				}
			case "resolved":
				for i, r := range pending {
					if r.ID == e.Request.ID {
						pending = append(pending[:i], pending[i+1:]...)
						break
					}
				}
				delete(later, e.Request.ID)
				if shown.ID != e.Request.ID {
					continue
				}
				if d := e.Decision; d != nil {
					p.s.hide()
					shown = approval.Request{}
					p.s.note(outcome(e.Request, d))
				}
				if p.auto || len(pending) > 0 {
					next()
				}
			}
		case <-p.s.opened():
			if shown.ID != "" {
				continue
			}
			for id := range later { // asked for again: show them all
				delete(later, id)
			}
			if len(pending) == 0 {
				p.s.note("airlock: nothing waits for a decision")
				continue
			}
			next()
		case k := <-p.s.keys():
			if shown.ID == "" {
				continue
			}
			d, ok, l := keyDecision(k)
			if l {
				id := shown.ID
				later[id] = true
				p.s.hide()
				shown = approval.Request{}
				if p.auto {
					p.s.note(fmt.Sprintf("airlock: left for later: airlock approve %s (or deny; airlock ui)", term.Printable(id)))
				}
				next()
				continue
			}
			if !ok || (d.Allow && !allowOK) {
				continue
			}
			if err := p.q.Decide(shown.ID, d); err != nil {
				p.s.note(fmt.Sprintf("airlock: %v", err))
			}
			// The resolved event takes the prompt down.
		}
	}
}

// outcome says how a shown request was decided, and by which surface.
func outcome(r approval.Request, d *approval.Decision) string {
	verb := "denied"
	if d.Allow {
		verb = "allowed"
	}
	scope := d.Scope
	if scope == "" {
		scope = approval.Once
	}
	subject := term.Printable(r.Subject)
	if len(subject) > 200 {
		subject = subject[:200] + "…"
	}
	switch d.By {
	case "terminal":
		return fmt.Sprintf("airlock: %s %s (%s)", verb, subject, scope)
	case "timeout":
		return fmt.Sprintf("airlock: denied %s: nobody answered in time", subject)
	}
	return fmt.Sprintf("airlock: %s %s (%s) — answered by %s", verb, subject, scope, term.Printable(d.By))
}

// truncate cuts s to n display columns (runes; the text is escaped).
func truncate(s string, n int) string {
	if n <= 0 {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}

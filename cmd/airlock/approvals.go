package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/term"
)

// newHub is every running sandbox's approvals, with the saved decisions.
func newHub() (*control.Hub, error) {
	store, err := openStore()
	if err != nil {
		return nil, err
	}
	h := &control.Hub{State: store}
	if dir, err := config.Dir(); err == nil {
		if h.Decisions, err = approval.OpenStore(dir); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// approvalsOptions is what airlock approvals needs.
type approvalsOptions struct {
	IO        *ioStreams
	Follow    bool // ask about each request on this terminal as it comes
	JSON      bool
	Decisions bool // list the saved decisions instead
	// Hub reaches every running sandbox's approvals and the saved decisions.
	Hub func() (*control.Hub, error)
}

func newApprovalsCmd(runF func(*approvalsOptions) error) *cobra.Command {
	o := &approvalsOptions{IO: systemIO(), Hub: newHub}
	c := &cobra.Command{
		Use:   "approvals [-f] [--json] [--decisions]",
		Short: "List what waits for your decision in every running sandbox",
		Long: `List the requests that wait for a decision in every running sandbox of
yours: connections to hosts no rule covers, in sandboxes started with --ask
(or approvals: ask in config). Answer with airlock approve ID or airlock
deny ID, from the browser (airlock ui), or here with -f.

-f follows: each new request is shown and asked about on this terminal:
  a  allow once        s  allow for the session    p  allow for the project
  g  allow everywhere  d  deny once                 D  deny everywhere
  w  toggle the wildcard (*.parent: one label plus the apex)   Enter  skip
A request nobody answers is denied when it times out (60s by default).

--decisions lists saved decisions (project and global), which airlock
revoke ID removes.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return approvalsRun(c.Context(), o)
		},
	}
	c.Flags().BoolVarP(&o.Follow, "follow", "f", false, "ask about each request on this terminal as it comes")
	c.Flags().BoolVar(&o.JSON, "json", false, "print JSON")
	c.Flags().BoolVar(&o.Decisions, "decisions", false, "list saved decisions instead")
	return c
}

func approvalsRun(ctx context.Context, o *approvalsOptions) error {
	h, err := o.Hub()
	if err != nil {
		return err
	}
	if o.Decisions {
		rules, err := h.Rules(ctx)
		if err != nil {
			return err
		}
		if o.JSON {
			return writeJSON(o.IO.Out, rules)
		}
		return printRules(o.IO.Out, rules)
	}
	if o.Follow {
		return followApprovals(ctx, h, o.IO.In, o.IO.Out)
	}
	pending, err := h.Pending(ctx)
	if err != nil {
		return err
	}
	if o.JSON {
		if pending == nil {
			pending = []approval.Request{}
		}
		return writeJSON(o.IO.Out, pending)
	}
	return printPending(o.IO.Out, pending)
}

func printPending(w io.Writer, pending []approval.Request) error {
	if len(pending) == 0 {
		fmt.Fprintln(w, "nothing waits for a decision")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSANDBOX\tWANTS\tWAITING\tDENIED IN\tWHY")
	for _, r := range pending {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Sandbox, term.Printable(r.Subject), r.Waiting,
			time.Until(r.Expires).Round(time.Second), term.Printable(r.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range pending {
		if r.Detail != "" {
			fmt.Fprintf(w, "\n%s %s:\n%s", r.ID, term.Printable(r.Subject), detailLines(r.Detail))
		}
	}
	return nil
}

// detailLines is a request's detail (what a host command will reach, a
// tool call's arguments), whole, each line indented, for a terminal.
func detailLines(d string) string {
	if d == "" {
		return ""
	}
	var b strings.Builder
	for _, l := range strings.Split(d, "\n") {
		b.WriteString("    " + term.Printable(l) + "\n")
	}
	return b.String()
}

func printRules(w io.Writer, rules []approval.Rule) error {
	if len(rules) == 0 {
		fmt.Fprintln(w, "no saved decisions")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tDECISION\tHOST\tSCOPE\tPROJECT\tEXPIRES\tBY")
	for _, r := range rules {
		verdict := "deny"
		if r.Allow {
			verdict = "allow"
		}
		exp := "never"
		if !r.Expires.IsZero() {
			exp = r.Expires.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, verdict, term.Printable(r.Host), r.Scope, dash(r.Project), exp, dash(r.By))
	}
	return tw.Flush()
}

// followApprovals asks about each request as it comes, until interrupted.
func followApprovals(ctx context.Context, h *control.Hub, in io.Reader, out io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	events, err := h.Watch(ctx)
	if err != nil {
		return err
	}
	pending, _ := h.Pending(ctx)
	queue := make(chan approval.Request, 256)
	for _, r := range pending {
		queue <- r
	}
	resolved := map[string]bool{}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	fmt.Fprintln(out, "waiting for requests (Ctrl-C to stop)")
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-events:
			if !ok {
				return nil
			}
			if e.Type == "resolved" {
				resolved[e.Request.ID] = true
				continue
			}
			select {
			case queue <- e.Request:
			default: // a flood: the rest stay listed by airlock approvals
			}
		case r := <-queue:
			if resolved[r.ID] {
				continue
			}
			if err := askOne(ctx, h, r, lines, out); err != nil {
				return err
			}
		}
	}
}

// askOne shows r and reads one answer.
func askOne(ctx context.Context, h *control.Hub, r approval.Request, lines <-chan string, out io.Writer) error {
	wildcard := false
	for {
		w := ""
		if wildcard {
			w = " [wildcard]"
		}
		fmt.Fprintf(out, "\n%s: sandbox %s wants %s (%s)%s\n%s  [a]llow once, [s]ession, [p]roject, [g]lobal; [d]eny once, [D]eny everywhere; [w]ildcard; Enter skips: ",
			r.ID, r.Sandbox, term.Printable(r.Subject), term.Printable(r.Reason), w, detailLines(r.Detail))
		var line string
		select {
		case <-ctx.Done():
			return nil
		case l, ok := <-lines:
			if !ok {
				return errors.New("end of input")
			}
			line = strings.TrimSpace(l)
		}
		d := approval.Decision{By: "cli", Wildcard: wildcard}
		switch line {
		case "":
			return nil
		case "w":
			wildcard = !wildcard
			continue
		case "a":
			d.Allow, d.Scope = true, approval.Once
		case "s":
			d.Allow, d.Scope = true, approval.Session
		case "p":
			d.Allow, d.Scope = true, approval.Project
		case "g":
			d.Allow, d.Scope = true, approval.Global
		case "d":
			d.Scope = approval.Once
		case "D":
			d.Scope = approval.Global
		default:
			fmt.Fprintln(out, "  (one of a s p g d D w, or Enter)")
			continue
		}
		if err := h.Decide(ctx, r.ID, d); err != nil {
			fmt.Fprintf(out, "  %s: %v\n", r.ID, err)
		} else {
			fmt.Fprintf(out, "  %s: %s\n", r.ID, describe(d))
		}
		return nil
	}
}

func describe(d approval.Decision) string {
	v := "denied"
	if d.Allow {
		v = "allowed"
	}
	s := fmt.Sprintf("%s (%s)", v, d.Scope)
	if d.Wildcard {
		s += " with its wildcard"
	}
	return s
}

// decideOptions is what airlock approve and airlock deny need.
type decideOptions struct {
	IO       *ioStreams
	Verb     string // approve or deny
	ID       string // the request's
	Decision approval.Decision
	Hub      func() (*control.Hub, error)
}

func newDecideCmd(allow bool, runF func(*decideOptions) error) *cobra.Command {
	var scope string
	var expires time.Duration
	verb := "deny"
	if allow {
		verb = "approve"
	}
	o := &decideOptions{IO: systemIO(), Verb: verb, Hub: newHub}
	c := &cobra.Command{
		Use:   verb + " ID [--scope once|session|project|global] [--wildcard]",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a request that waits (see airlock approvals)",
		Long: `Answer one request (its ID from airlock approvals). --scope says how long
the decision holds: once (this request and the connections waiting with it),
session (this sandbox until it stops), project (saved: every sandbox of this
project) or global (saved: every sandbox). --wildcard makes it hold for the
host's parent domain: *.example.com (one label plus the apex). A deny wins
over any allow, whatever its source.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Sprintf("give one request ID: airlock %s ID (see airlock approvals)", verb)}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.ID = args[0]
			d := &o.Decision
			d.Allow, d.Scope, d.By = allow, approval.Scope(scope), "cli"
			if !d.Scope.Valid() {
				return usageError{fmt.Sprintf("--scope %q: use once, session, project or global", scope)}
			}
			if expires < 0 {
				return usageError{"--expires must not be negative"}
			}
			if expires > 0 {
				if !d.Scope.Saved() {
					return usageError{"--expires goes with --scope project or global"}
				}
				d.Expires = time.Now().Add(expires)
			}
			o.IO.Out = c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return decideRun(c.Context(), o)
		},
	}
	c.Flags().StringVar(&scope, "scope", string(approval.Once), "how long the decision holds: once, session, project or global")
	c.Flags().BoolVar(&o.Decision.Wildcard, "wildcard", false, "hold for *.parent (one label plus the apex) rather than the host alone")
	c.Flags().DurationVar(&expires, "expires", 0, "saved decisions: lapse after this long, e.g. 24h")
	return c
}

func decideRun(ctx context.Context, o *decideOptions) error {
	h, err := o.Hub()
	if err != nil {
		return err
	}
	if err := h.Decide(ctx, o.ID, o.Decision); err != nil {
		return fmt.Errorf("%s %s: %w", o.Verb, o.ID, err)
	}
	fmt.Fprintf(o.IO.Out, "%s: %s\n", o.ID, describe(o.Decision))
	return nil
}

// revokeOptions is what airlock revoke needs.
type revokeOptions struct {
	IO  *ioStreams
	ID  string // the saved decision's
	Hub func() (*control.Hub, error)
}

func newRevokeCmd(runF func(*revokeOptions) error) *cobra.Command {
	o := &revokeOptions{IO: systemIO(), Hub: newHub}
	return &cobra.Command{
		Use:   "revoke RULE-ID",
		Short: "Remove a saved decision (see airlock approvals --decisions)",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{"give one saved decision's ID: airlock revoke ID (see airlock approvals --decisions)"}
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			o.ID, o.IO.Out = args[0], c.OutOrStdout()
			if runF != nil {
				return runF(o)
			}
			return revokeRun(c.Context(), o)
		},
	}
}

func revokeRun(ctx context.Context, o *revokeOptions) error {
	h, err := o.Hub()
	if err != nil {
		return err
	}
	r, err := h.Revoke(ctx, o.ID)
	if err != nil {
		return fmt.Errorf("revoke %s: %w", o.ID, err)
	}
	fmt.Fprintf(o.IO.Out, "revoked %s (%s %s)\n", r.ID, map[bool]string{true: "allow", false: "deny"}[r.Allow], r.Host)
	return nil
}

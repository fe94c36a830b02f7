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

func newApprovalsCmd() *cobra.Command {
	var follow, asJSON, saved bool
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
			h, err := newHub()
			if err != nil {
				return err
			}
			ctx := c.Context()
			if saved {
				rules, err := h.Rules(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(c.OutOrStdout(), rules)
				}
				return printRules(c.OutOrStdout(), rules)
			}
			if follow {
				return followApprovals(ctx, h, os.Stdin, c.OutOrStdout())
			}
			pending, err := h.Pending(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				if pending == nil {
					pending = []approval.Request{}
				}
				return writeJSON(c.OutOrStdout(), pending)
			}
			return printPending(c.OutOrStdout(), pending)
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "ask about each request on this terminal as it comes")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&saved, "decisions", false, "list saved decisions instead")
	return c
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

func newDecideCmd(allow bool) *cobra.Command {
	var scope string
	var wildcard bool
	var expires time.Duration
	verb := "deny"
	if allow {
		verb = "approve"
	}
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
			d := approval.Decision{Allow: allow, Scope: approval.Scope(scope), Wildcard: wildcard, By: "cli"}
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
			h, err := newHub()
			if err != nil {
				return err
			}
			if err := h.Decide(c.Context(), args[0], d); err != nil {
				return fmt.Errorf("%s %s: %w", verb, args[0], err)
			}
			fmt.Fprintf(c.OutOrStdout(), "%s: %s\n", args[0], describe(d))
			return nil
		},
	}
	c.Flags().StringVar(&scope, "scope", string(approval.Once), "how long the decision holds: once, session, project or global")
	c.Flags().BoolVar(&wildcard, "wildcard", false, "hold for *.parent (one label plus the apex) rather than the host alone")
	c.Flags().DurationVar(&expires, "expires", 0, "saved decisions: lapse after this long, e.g. 24h")
	return c
}

func newRevokeCmd() *cobra.Command {
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
			h, err := newHub()
			if err != nil {
				return err
			}
			r, err := h.Revoke(c.Context(), args[0])
			if err != nil {
				return fmt.Errorf("revoke %s: %w", args[0], err)
			}
			fmt.Fprintf(c.OutOrStdout(), "revoked %s (%s %s)\n", r.ID, map[bool]string{true: "allow", false: "deny"}[r.Allow], r.Host)
			return nil
		},
	}
}

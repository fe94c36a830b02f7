package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/suggest"
	"github.com/airlock-dev/airlock/internal/term"
)

func newPolicyCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "Make a policy from what a run needed",
		Long: `Make a policy from what a run needed: airlock policy suggest ID reads the
run's audit log and prints the smallest config that would have allowed what
it was refused; --write merges it into the project's file after asking.`,
		Args: noArgs,
	}
	c.AddCommand(newPolicySuggestCmd(nil))
	return c
}

// policySuggestOptions is what airlock policy suggest needs.
type policySuggestOptions struct {
	IO    *ioStreams
	Ref   string // the sandbox
	Write bool   // merge into the project file
	Yes   bool   // without asking
	// Interactive says whether a person can be asked (stdin and stderr are terminals).
	Interactive bool
	// Resolve finds the sandbox.
	Resolve func(ref string) (state.Entry, error)
}

func newPolicySuggestCmd(runF func(*policySuggestOptions) error) *cobra.Command {
	o := &policySuggestOptions{IO: systemIO(), Resolve: resolve}
	c := &cobra.Command{
		Use:   "suggest ID|NAME [--write [--yes]]",
		Short: "Print the smallest config that would have allowed what a run was refused",
		Long: `Read a sandbox's audit log and print the smallest config that would have
allowed what it was refused: hosts no rule covered, requests endpoint rules
did not allow, MCP tools no rule named, host commands no rule matched or
that someone was asked about. Each entry comes under a comment saying which
records asked for it and how many times.

Hosts are suggested by name. Two or more names under one parent that the
Public Suffix List says one owner registers (a.example.com, b.example.com)
become *.example.com; never *.com, *.co.uk or *.github.io. Nothing a deny
rule of your config covers is suggested (an allow would be overridden): it
is listed as such. The names in an audit log were chosen by what ran in the
sandbox, so they are checked (DNS names in ASCII, no patterns, no
addresses) and printed escaped.

--write merges the suggestion into the project's file in your config dir
(the one airlock config edit opens; never a file in the workspace) after
showing the difference and asking. Without a terminal to ask on, it needs
--yes. MCP tools are printed, not merged: a project file's mcp_servers
would replace the global one's.`,
		Example: `  airlock run --keep --name try -- make test     # refused hosts are audited
  airlock policy suggest try
  airlock policy suggest try --write              # shows the diff, asks y/N`,
		Args: oneArg("sandbox ID or name"),
		RunE: func(c *cobra.Command, args []string) error {
			o.Ref = args[0]
			o.Interactive = term.IsTerminal(os.Stdin) && term.IsTerminal(os.Stderr)
			if o.Yes && !o.Write {
				return usageError{"--yes goes with --write: airlock policy suggest " + args[0] + " --write --yes"}
			}
			if runF != nil {
				return runF(o)
			}
			return policySuggestRun(o)
		},
	}
	c.Flags().BoolVar(&o.Write, "write", false, "merge the suggestion into the project's config file (after showing the diff and asking)")
	c.Flags().BoolVarP(&o.Yes, "yes", "y", false, "with --write: write without asking")
	return c
}

// maxAuditFiles bounds how many of a run's audit files (the current one
// and the newest rotated ones) are read.
const maxAuditFiles = 16

func policySuggestRun(o *policySuggestOptions) error {
	e, err := o.Resolve(o.Ref)
	if err != nil {
		return err
	}
	path := filepath.Join(e.Dir, "audit.jsonl")
	files := audit.Files(path)
	if len(files) > maxAuditFiles {
		files = files[len(files)-maxAuditFiles:]
	}
	var ns suggest.Needs
	read := 0
	for _, p := range files {
		f, err := os.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("policy suggest: %w", err)
		}
		err = ns.Read(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("policy suggest: read %s: %w", p, err)
		}
		read++
	}
	if read == 0 {
		return fmt.Errorf("sandbox %s has no audit log: it had no network, so nothing was refused", o.Ref)
	}
	ws := e.Record.Workspace
	if ws == "" || !filepath.IsAbs(ws) {
		return fmt.Errorf("sandbox %s has no workspace on record", o.Ref)
	}
	// The config the suggestion must respect is the one a run in that
	// workspace would load now: its denies hold whatever is suggested.
	l, err := config.Load(config.Options{Workspace: ws})
	if err != nil {
		return err
	}
	sp := l.Spec
	// The rules the run had (its flags too) join the files': a refusal by
	// the run's endpoint rules is one to suggest for, and a deny it ran
	// with is never suggested around.
	var ran struct {
		Config config.Spec `json:"config"`
	}
	if len(e.Record.Config) > 0 {
		if err := json.Unmarshal(e.Record.Config, &ran); err != nil {
			return fmt.Errorf("policy suggest: sandbox %s's record: %w", o.Ref, err)
		}
	}
	rn := ran.Config.Network
	union := func(a, b []string) []string {
		out := slices.Clone(a)
		for _, x := range b {
			if !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
		return out
	}
	// Saved decisions hold in every run: a saved deny is a deny, a saved
	// allow already allows.
	var savedAllow, savedDeny []string
	if l.Dir != "" {
		store, err := approval.OpenStore(l.Dir)
		if err != nil {
			return fmt.Errorf("policy suggest: %w", err)
		}
		savedAllow, savedDeny = approval.HostRules(store.Rules(l.Project), time.Now())
	}
	cur := suggest.Current{AllowHosts: union(union(sp.Network.AllowHosts, rn.AllowHosts), savedAllow), TunnelHosts: union(sp.Network.TunnelHosts, rn.TunnelHosts),
		DenyHosts: union(union(sp.Network.DenyHosts, rn.DenyHosts), savedDeny), Endpoints: union(sp.Network.Endpoints, rn.Endpoints),
		FileEndpoints: sp.Network.Endpoints, HostExecDeny: union(sp.HostExec.AutoDeny, ran.Config.HostExec.AutoDeny),
		Origin: func(key, rule string) string {
			var list []string
			switch key {
			case "network.deny_hosts":
				list = sp.Network.DenyHosts
			case "hostexec.auto_deny":
				list = sp.HostExec.AutoDeny
			}
			for i, r := range list {
				if r == rule && i < len(l.Origins[key]) {
					return l.Origins[key][i].String()
				}
			}
			if key == "network.deny_hosts" && slices.Contains(savedDeny, rule) {
				return "a saved decision: airlock approvals --decisions"
			}
			return "the run's"
		}}
	s, err := suggest.Suggest(&ns, cur)
	if err != nil {
		return err
	}
	out := o.IO.Out
	fmt.Fprintf(out, "# What sandbox %s (in %s) was refused, as config: %d audit records read.\n", e.Record.ID, suggest.Quote(ws), ns.Records)
	if s.Empty() {
		fmt.Fprintln(out, "# Nothing to suggest: no refusal an allow rule would have changed.")
		if ns.Network == 0 {
			// Without an allow rule a run has loopback only and no gateway:
			// nothing it tried to reach was seen.
			fmt.Fprintln(out, "# The run had no network at all (no allow rule, so no gateway saw what it tried):\n# run it with one, e.g. --allow-host example.com, or --ask, to have its refusals recorded.")
		}
	}
	if err := suggest.Render(out, s); err != nil {
		return err
	}
	if !o.Write {
		if !s.Empty() {
			fmt.Fprintf(o.IO.ErrOut, "airlock: to add this to %s: airlock policy suggest %s --write\n", config.DisplayPath(projectFileOf(l)), o.Ref)
		}
		return nil
	}
	return writeSuggestion(o, l, s)
}

func projectFileOf(l *config.Loaded) string { return config.ProjectFile(l.Dir, l.Project) }

// writeSuggestion merges s into the project file after showing the diff
// and asking. The file is in airlock's config dir, keyed by the project
// the workspace was recorded under: never in the workspace, which the
// sandbox could write.
func writeSuggestion(o *policySuggestOptions, l *config.Loaded, s *suggest.Suggestion) error {
	if l.Dir == "" {
		return errNoConfigDir
	}
	entries := s.Writable()
	if len(entries) == 0 {
		fmt.Fprintln(o.IO.ErrOut, "airlock: nothing to write")
		return nil
	}
	path := projectFileOf(l)
	real := path
	if r, err := filepath.EvalSymlinks(path); err == nil {
		real = r // a dotfile manager's link: write where it leads, as config reads it
	}
	for _, d := range []string{l.Spec.Workspace.Path, l.Project} {
		if in, _ := filepath.Rel(d, real); d != "" && !strings.HasPrefix(in, "..") && in != ".." {
			return fmt.Errorf("policy suggest: the project file %s is inside %s, which a sandbox can write: refusing to widen a policy there; set XDG_CONFIG_HOME outside it", real, d)
		}
	}
	old, err := config.ReadRegular(real, config.MaxFileSize)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("policy suggest: read %s: %w", path, err)
	}
	merged, added, err := suggest.Merge(real, old, l.Project, entries)
	if err != nil {
		return err
	}
	if added == 0 {
		fmt.Fprintf(o.IO.ErrOut, "airlock: %s already has all of it\n", config.DisplayPath(path))
		return nil
	}
	fmt.Fprintf(o.IO.ErrOut, "\n--- %s\n+++ %s (with the suggestion)\n%s", config.DisplayPath(path), config.DisplayPath(path), suggest.Diff(old, merged))
	if !o.Yes {
		if !o.Interactive {
			return errors.New("policy suggest --write asks before widening the policy, and there is no terminal to ask on: review the diff above, then run it again with --yes")
		}
		fmt.Fprintf(o.IO.ErrOut, "Add %d %s to %s? [y/N] ", added, map[bool]string{true: "entry", false: "entries"}[added == 1], config.DisplayPath(path))
		line, _ := bufio.NewReader(io.LimitReader(o.IO.In, 256)).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(o.IO.ErrOut, "airlock: nothing written")
			return nil
		}
	}
	if err := config.WriteFileAtomic(real, merged, 0o600); err != nil {
		return fmt.Errorf("policy suggest: write %s: %w", path, err)
	}
	fmt.Fprintf(o.IO.ErrOut, "airlock: added %d to %s\n", added, config.DisplayPath(path))
	return nil
}

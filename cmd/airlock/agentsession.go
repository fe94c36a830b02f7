package main

import (
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/agentrun"
	"github.com/airlock-dev/airlock/internal/agents"
)

// agentSessionsOptions is what airlock agent sessions needs.
type agentSessionsOptions struct {
	IO    *ioStreams
	Agent string // "" for every agent
	All   bool   // every project's, not only the current directory's
	// Project is the current directory's project (asked only without All).
	Project func() (string, error)
}

func newAgentSessionsCmd(runF func(*agentSessionsOptions) error) *cobra.Command {
	o := &agentSessionsOptions{IO: systemIO(), Project: func() (string, error) {
		ws, err := resolveWorkspace("")
		if err != nil {
			return "", err
		}
		return projectOf(ws), nil
	}}
	c := &cobra.Command{
		Use:   "sessions [NAME]",
		Short: "List agent sessions that can be resumed (--resume ID)",
		Long: `List the agent sessions airlock recorded, newest first: by default those of
the current directory's project (--all for every project). Resume one with
airlock agent run NAME --resume ID.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.Agent = args[0]
			}
			if runF != nil {
				return runF(o)
			}
			return agentSessionsRun(o)
		},
	}
	c.Flags().BoolVarP(&o.All, "all", "a", false, "sessions of every project, not only this directory's")
	return c
}

func agentSessionsRun(o *agentSessionsOptions) error {
	names := agents.Names()
	if o.Agent != "" {
		p, err := agents.Lookup(o.Agent)
		if err != nil {
			return usageError{err.Error()}
		}
		names = []string{p.Name}
	}
	project := ""
	if !o.All {
		var err error
		if project, err = o.Project(); err != nil {
			return err
		}
	}
	var ss []agentrun.Session
	for _, n := range names {
		dir, err := agentrun.SessionsDir(n)
		if err != nil {
			return err
		}
		got, err := agentrun.ReadSessions(dir)
		if err != nil {
			return err
		}
		for _, s := range got {
			if project == "" || s.Project == project {
				ss = append(ss, s)
			}
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].Ended.After(ss[j].Ended) })
	w := tabwriter.NewWriter(o.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "AGENT\tSESSION\tENDED\tEXIT\tWORKSPACE")
	for _, s := range ss {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", s.Agent, s.ID, s.Ended.Local().Format("2006-01-02 15:04"), s.Exit, s.Workspace)
	}
	return w.Flush()
}

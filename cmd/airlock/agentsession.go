package main

import (
	"fmt"
	"os"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/agentrun"
	"github.com/airlock-dev/airlock/internal/agents"
)

func newAgentSessionsCmd() *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "sessions [NAME]",
		Short: "List agent sessions that can be resumed (--resume ID)",
		Long: `List the agent sessions airlock recorded, newest first: by default those of
the current directory's project (--all for every project). Resume one with
airlock agent run NAME --resume ID.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			names := agents.Names()
			if len(args) == 1 {
				p, err := agents.Lookup(args[0])
				if err != nil {
					return usageError{err.Error()}
				}
				names = []string{p.Name}
			}
			project := ""
			if !all {
				ws, err := resolveWorkspace("")
				if err != nil {
					return err
				}
				project = projectOf(ws)
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
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "AGENT\tSESSION\tENDED\tEXIT\tWORKSPACE")
			for _, s := range ss {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", s.Agent, s.ID, s.Ended.Local().Format("2006-01-02 15:04"), s.Exit, s.Workspace)
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVarP(&all, "all", "a", false, "sessions of every project, not only this directory's")
	return c
}

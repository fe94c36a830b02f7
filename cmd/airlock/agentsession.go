package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/agents"
)

// agentSession is one agent session airlock saw end, kept so it can be
// resumed by the agent's own id (never "continue the last one", which picks
// whatever the agent saw last, maybe another project's).
type agentSession struct {
	Agent     string    `json:"agent"`
	ID        string    `json:"id"` // the agent's own resume id
	Project   string    `json:"project"`
	Workspace string    `json:"workspace"`
	Home      string    `json:"home"`
	Started   time.Time `json:"started"`
	Ended     time.Time `json:"ended"`
	Exit      int       `json:"exit"`
}

// maxSessionsKept bounds the session records per agent; the oldest go.
const maxSessionsKept = 200

func sessionsDir(agent string) (string, error) {
	d, err := agentsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "sessions", agent), nil
}

// validSessionID keeps an agent's id usable as a file name and an argument.
func validSessionID(id string) bool {
	if id == "" || len(id) > 128 || id[0] == '-' || id[0] == '.' {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// recordSession asks the profile which session the run left in the agent's
// home and records it. Failing to is a warning: the run itself is done.
func recordSession(p *agents.Profile, project, ws, home string, started time.Time, code int, quiet bool) {
	warn := func(format string, a ...any) {
		if !quiet {
			fmt.Fprintf(os.Stderr, "airlock: warning: "+format+"\n", a...)
		}
	}
	if p.FindSession == nil {
		return
	}
	id, err := findSessionWithin(p, home, started, findSessionTimeout)
	if err != nil {
		warn("could not find the %s session to resume: %v", p.Display, err)
		return
	}
	if id == "" {
		return
	}
	if !validSessionID(id) {
		warn("%s left a session id airlock does not keep (%q)", p.Display, id)
		return
	}
	dir, err := sessionsDir(p.Name)
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		warn("sessions: %v", err)
		return
	}
	s := agentSession{Agent: p.Name, ID: id, Project: project, Workspace: ws, Home: home, Started: started.UTC(), Ended: time.Now().UTC(), Exit: code}
	b, _ := json.MarshalIndent(s, "", "  ")
	tmp := filepath.Join(dir, "."+id+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		warn("sessions: %v", err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(dir, id+".json")); err != nil {
		os.Remove(tmp)
		warn("sessions: %v", err)
		return
	}
	if !quiet {
		fmt.Fprintf(os.Stderr, "airlock: %s session %s: go on with airlock agent run %s --resume %s\n", p.Display, id, p.Name, id)
	}
	pruneSessions(dir)
}

// findSessionTimeout bounds the look for a session in the agent's home
// (which the sandbox could write): the reads there never block, and this
// is the backstop, so a run always ends once its agent has.
const findSessionTimeout = 15 * time.Second

func findSessionWithin(p *agents.Profile, home string, since time.Time, d time.Duration) (string, error) {
	type found struct {
		id  string
		err error
	}
	ch := make(chan found, 1)
	go func() { id, err := p.FindSession(home, since); ch <- found{id, err} }()
	select {
	case f := <-ch:
		return f.id, f.err
	case <-time.After(d):
		return "", fmt.Errorf("gave up after %s", d)
	}
}

// pruneSessions keeps the newest maxSessionsKept records.
func pruneSessions(dir string) {
	ss, _ := readSessions(dir)
	for i := maxSessionsKept; i < len(ss); i++ {
		os.Remove(filepath.Join(dir, ss[i].ID+".json"))
	}
}

// readSessions reads dir's records, newest first.
func readSessions(dir string) ([]agentSession, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var ss []agentSession
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var s agentSession
		if json.Unmarshal(b, &s) == nil && validSessionID(s.ID) {
			ss = append(ss, s)
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].Ended.After(ss[j].Ended) })
	return ss, nil
}

// findSession resolves --resume: "last" (this project's newest), an id, or
// a unique prefix of one. A session of another project is refused: its
// home, where the agent keeps it, is that project's.
func findSession(agent, project, ref string) (agentSession, error) {
	dir, err := sessionsDir(agent)
	if err != nil {
		return agentSession{}, err
	}
	ss, err := readSessions(dir)
	if err != nil {
		return agentSession{}, err
	}
	if ref == "last" {
		for _, s := range ss {
			if s.Project == project {
				return s, nil
			}
		}
		return agentSession{}, fmt.Errorf("--resume last: no %s session recorded for %s yet (airlock agent sessions lists them)", agent, project)
	}
	var match []agentSession
	for _, s := range ss {
		if s.ID == ref {
			match = []agentSession{s}
			break
		}
		if strings.HasPrefix(s.ID, ref) {
			match = append(match, s)
		}
	}
	switch {
	case len(match) == 0:
		return agentSession{}, fmt.Errorf("--resume %s: no such %s session (airlock agent sessions lists them)", ref, agent)
	case len(match) > 1:
		return agentSession{}, fmt.Errorf("--resume %s: %d %s sessions start so; give more of the id", ref, len(match), agent)
	case match[0].Project != project:
		return agentSession{}, fmt.Errorf("--resume %s: that session belongs to %s; run with --workspace %s", ref, match[0].Project, match[0].Workspace)
	}
	return match[0], nil
}

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
			var ss []agentSession
			for _, n := range names {
				dir, err := sessionsDir(n)
				if err != nil {
					return err
				}
				got, err := readSessions(dir)
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

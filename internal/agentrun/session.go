package agentrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/internal/agents"
)

// Session is one agent session airlock saw end, kept so it can be
// resumed by the agent's own id (never "continue the last one", which picks
// whatever the agent saw last, maybe another project's).
type Session struct {
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

// SessionsDir is where agent's session records are kept.
func SessionsDir(agent string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "sessions", agent), nil
}

// ValidSessionID keeps an agent's id usable as a file name and an argument.
func ValidSessionID(id string) bool {
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

// RecordSession asks the profile which session the run left in the agent's
// home and records it. Failing to is a warning: the run itself is done.
func RecordSession(p *agents.Profile, project, ws, home string, started time.Time, code int, stderr io.Writer, quiet bool) {
	warn := func(format string, a ...any) {
		if !quiet {
			fmt.Fprintf(stderr, "airlock: warning: "+format+"\n", a...)
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
	if !ValidSessionID(id) {
		warn("%s left a session id airlock does not keep (%q)", p.Display, id)
		return
	}
	dir, err := SessionsDir(p.Name)
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		warn("sessions: %v", err)
		return
	}
	s := Session{Agent: p.Name, ID: id, Project: project, Workspace: ws, Home: home, Started: started.UTC(), Ended: time.Now().UTC(), Exit: code}
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
		fmt.Fprintf(stderr, "airlock: %s session %s: go on with airlock agent run %s --resume %s\n", p.Display, id, p.Name, id)
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
	ss, _ := ReadSessions(dir)
	for i := maxSessionsKept; i < len(ss); i++ {
		os.Remove(filepath.Join(dir, ss[i].ID+".json"))
	}
}

// ReadSessions reads dir's records, newest first.
func ReadSessions(dir string) ([]Session, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var ss []Session
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var s Session
		if json.Unmarshal(b, &s) == nil && ValidSessionID(s.ID) {
			ss = append(ss, s)
		}
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].Ended.After(ss[j].Ended) })
	return ss, nil
}

// FindSession resolves --resume: "last" (this project's newest), an id, or
// a unique prefix of one. A session of another project is refused: its
// home, where the agent keeps it, is that project's.
func FindSession(agent, project, ref string) (Session, error) {
	dir, err := SessionsDir(agent)
	if err != nil {
		return Session{}, err
	}
	ss, err := ReadSessions(dir)
	if err != nil {
		return Session{}, err
	}
	if ref == "last" {
		for _, s := range ss {
			if s.Project == project {
				return s, nil
			}
		}
		return Session{}, fmt.Errorf("--resume last: no %s session recorded for %s yet (airlock agent sessions lists them)", agent, project)
	}
	var match []Session
	for _, s := range ss {
		if s.ID == ref {
			match = []Session{s}
			break
		}
		if strings.HasPrefix(s.ID, ref) {
			match = append(match, s)
		}
	}
	switch {
	case len(match) == 0:
		return Session{}, fmt.Errorf("--resume %s: no such %s session (airlock agent sessions lists them)", ref, agent)
	case len(match) > 1:
		return Session{}, fmt.Errorf("--resume %s: %d %s sessions start so; give more of the id", ref, len(match), agent)
	case match[0].Project != project:
		return Session{}, fmt.Errorf("--resume %s: that session belongs to %s; run with --workspace %s", ref, match[0].Project, match[0].Workspace)
	}
	return match[0], nil
}

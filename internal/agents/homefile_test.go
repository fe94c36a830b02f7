package agents

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sessionStores are, per agent, where a session is looked for and one
// valid session there.
var sessionStores = []struct {
	agent, dir, name, content, id string
}{
	{"claude", ".claude/projects/p", "564c817a-f0dd-4b05-b87f-47286602ce2b.jsonl", "{}\n", "564c817a-f0dd-4b05-b87f-47286602ce2b"},
	{"codex", ".codex/sessions/2026/11/23", "rollout-2026-11-23T20-21-30-01a20a12-22fb-75a1-a1c0-18e6c1d2b814.jsonl",
		`{"type":"session_meta","payload":{"id":"01a20a12-22fb-75a1-a1c0-18e6c1d2b814"}}` + "\n", "01a20a12-22fb-75a1-a1c0-18e6c1d2b814"},
	{"gemini", ".gemini/tmp/ws/chats", "session-2026-11-23T20-20-564c817a.jsonl",
		`{"sessionId":"564c817a-f0dd-4b05-b87f-47286602ce2b","kind":"main"}` + "\n", "564c817a-f0dd-4b05-b87f-47286602ce2b"},
	{"goose", ".local/share/goose/sessions", "20251108_2.jsonl", "{}\n", "20251108_2"},
	{"opencode", ".local/share/opencode/log", "opencode.log",
		"timestamp=" + time.Now().UTC().Format("2006-01-02T15:04:05.000Z") + " level=INFO message=created id=ses_main slug=x parentID=undefined\n", "ses_main"},
}

// findWithin runs FindSession and fails the test if it has not returned
// within 10 s (a blocking open never would).
func findWithin(t *testing.T, p *Profile, home string, since time.Time) (string, error) {
	t.Helper()
	type res struct {
		id  string
		err error
	}
	ch := make(chan res, 1)
	go func() { id, err := p.FindSession(home, since); ch <- res{id, err} }()
	select {
	case r := <-ch:
		return r.id, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: FindSession did not return within 10s (blocked on a file the sandbox planted)", p.Name)
		return "", nil
	}
}

// TestFindSessionTakesOnlyRegularFilesBeneathTheHome plants, where each
// agent's session is looked for, what a sandbox can leave in its home: a
// FIFO (an open would block airlock after the agent exits), a link to a
// FIFO or to a valid session elsewhere, a linked directory on the way, a
// huge sparse file. None hangs and none is taken; the same session put
// there as a plain file is found.
func TestFindSessionTakesOnlyRegularFilesBeneathTheHome(t *testing.T) {
	since := time.Now().Add(-time.Minute)
	for _, s := range sessionStores {
		p, err := Lookup(s.agent)
		if err != nil {
			t.Fatal(err)
		}
		plant := func(t *testing.T, how func(home, dir, file, outside string)) string {
			home, outside := t.TempDir(), t.TempDir()
			dir := filepath.Join(home, s.dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			how(home, dir, filepath.Join(dir, s.name), outside)
			return home
		}
		mkfifo := func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(s.agent, func(t *testing.T) {
			home := plant(t, func(home, dir, file, outside string) { os.WriteFile(file, []byte(s.content), 0o644) })
			if got, err := findWithin(t, p, home, since); err != nil || got != s.id {
				t.Fatalf("positive control: FindSession = %q, %v; want %q", got, err, s.id)
			}
			hostile := map[string]func(home, dir, file, outside string){
				"a FIFO named as the session": func(home, dir, file, outside string) { mkfifo(t, file) },
				"a link to a FIFO outside": func(home, dir, file, outside string) {
					mkfifo(t, filepath.Join(outside, "fifo"))
					os.Symlink(filepath.Join(outside, "fifo"), file)
				},
				"a link to a session outside": func(home, dir, file, outside string) {
					os.WriteFile(filepath.Join(outside, s.name), []byte(s.content), 0o644)
					os.Symlink(filepath.Join(outside, s.name), file)
				},
				"the session directory linked outside": func(home, dir, file, outside string) {
					os.WriteFile(filepath.Join(outside, s.name), []byte(s.content), 0o644)
					os.RemoveAll(dir)
					os.Symlink(outside, dir)
				},
				"the first directory on the way linked outside": func(home, dir, file, outside string) {
					first := strings.Split(s.dir, "/")[0]
					moved := filepath.Join(outside, first)
					os.WriteFile(file, []byte(s.content), 0o644)
					if err := os.Rename(filepath.Join(home, first), moved); err != nil {
						t.Fatal(err)
					}
					os.Symlink(moved, filepath.Join(home, first))
				},
			}
			for name, how := range hostile {
				home := plant(t, how)
				if got, _ := findWithin(t, p, home, since); got == s.id {
					t.Errorf("%s: FindSession took the planted session %q", name, got)
				}
			}
			// A huge sparse file with no newline: read within bounds, quickly.
			home = plant(t, func(home, dir, file, outside string) {
				f, err := os.Create(file)
				if err != nil {
					t.Fatal(err)
				}
				f.Truncate(8 << 30)
				f.Close()
			})
			start := time.Now()
			findWithin(t, p, home, since)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("an 8 GiB sparse session file took %s to look at", d)
			}
		})
	}
}

func TestGooseIgnoresAFIFOMarker(t *testing.T) {
	p, _ := Lookup("goose")
	home := t.TempDir()
	store := filepath.Join(home, gooseDataDir)
	os.MkdirAll(store, 0o755)
	os.WriteFile(filepath.Join(store, "20251108_2.jsonl"), []byte("{}"), 0o644)
	if err := syscall.Mkfifo(filepath.Join(home, gooseMarker), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := findWithin(t, p, home, time.Now().Add(-time.Minute)); err != nil || got != "20251108_2" {
		t.Errorf("FindSession with a FIFO marker = %q, %v; want the store's newest session", got, err)
	}
}

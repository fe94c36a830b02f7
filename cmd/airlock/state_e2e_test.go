//go:build linux

package main

// What runs leave in the state dir: a harness that calls airlock run per
// tool call must not fill it. They run as root and, through
// TestUnprivileged, as uid 65534.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/state"
)

// listed is what airlock ls --json says, by id.
func (e *env) listed() map[string]entryJSON {
	e.t.Helper()
	r := e.run("ls", "--json")
	var l []entryJSON
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || r.code != 0 {
		e.t.Fatalf("ls --json: %v (%v)", r, err)
	}
	m := map[string]entryJSON{}
	for _, x := range l {
		m[x.ID] = x
	}
	return m
}

// sandboxDirs are the sandbox directories in the state dir, debris
// included (but the empty spares that wait for the next sandbox).
func (e *env) sandboxDirs() []string { return state.Leftovers(e.state) }

// bundles are the CA bundle files the state dir holds.
func (e *env) bundles() []string {
	m, _ := filepath.Glob(filepath.Join(e.state, engine.BundleDir, "ca-bundle-*.pem"))
	return m
}

var keptLine = regexp.MustCompile(`kept sandbox ([0-9a-f]{12})`)

func TestAForegroundRunWithNothingToReviewLeavesNothingBehind(t *testing.T) {
	e := newEnv(t)
	e.write("f.txt", "x\n")
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"a command that succeeds", []string{"--", "true"}, 0},
		{"a command that fails", []string{"--", "sh", "-c", "exit 3"}, 3},
		{"a run with network, whose audit log is gone with it", []string{"--allow-host", "example.com", "--", "true"}, 0},
		{"an overlay run that changed nothing", []string{"--workspace-mode", "overlay", "--", "cat", "f.txt"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.run(append([]string{"run"}, c.args...)...)
			if r.code != c.code {
				t.Fatalf("want exit %d: %v", c.code, r)
			}
			if strings.Contains(r.stderr, "kept") {
				t.Errorf("a run with nothing to keep says it kept something: %v", r)
			}
			if d := e.sandboxDirs(); len(d) != 0 {
				t.Fatalf("the run left %v in the state dir", d)
			}
			if l := e.listed(); len(l) != 0 {
				t.Fatalf("ls lists %v", l)
			}
		})
	}
	// The network run left one file behind: the bundle every later sandbox
	// shares (the positive control that it ran with a gateway at all).
	if b := e.bundles(); len(b) != 1 {
		t.Fatalf("want one shared CA bundle, got %v", b)
	}
}

func TestKeepKeepsARunAndItsAuditLog(t *testing.T) {
	e := newEnv(t)
	r := e.run("run", "--keep", "--allow-host", "example.com", "--", "sh", "-c", "exit 3")
	m := keptLine.FindStringSubmatch(r.stderr)
	if r.code != 3 || m == nil {
		t.Fatalf("want exit 3 and the kept sandbox's id on stderr: %v", r)
	}
	id := m[1]
	l := e.listed()
	if x, ok := l[id]; len(l) != 1 || !ok || x.Status.State != state.Exited || x.Status.ExitCode == nil || *x.Status.ExitCode != 3 {
		t.Fatalf("ls: %+v", l)
	}
	recs := auditRecords(t, e, id)
	started := false
	for _, rec := range recs {
		started = started || rec.Kind == audit.KindLifecycle && rec.Op == audit.OpStart
	}
	if !started {
		t.Fatalf("the kept audit log has no start: %+v", recs)
	}
	if r := e.run("rm", id); r.code != 0 || len(e.sandboxDirs()) != 0 {
		t.Fatalf("rm: %v, left %v", r, e.sandboxDirs())
	}
	// -q keeps it just the same, silently.
	if r := e.run("run", "-q", "--keep", "--", "true"); r.code != 0 || r.stderr != "" || len(e.listed()) != 1 {
		t.Fatalf("run -q --keep: %v; listed %v", r, e.listed())
	}
}

func TestARunThatMustBeKeptIsKept(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		code  int
		named string
	}{
		{"a named run, to be found by its name", []string{"--name", "job", "--", "true"}, 0, "job"},
		{"a run with changes waiting for review", []string{"--workspace-mode", "overlay", "--", "sh", "-c", "echo new > new.txt"}, 0, ""},
		{"a run airlock stopped at its timeout", []string{"--timeout", "1s", "--", "sleep", "30"}, 124, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			r := e.run(append([]string{"run"}, c.args...)...)
			if r.code != c.code {
				t.Fatalf("want exit %d: %v", c.code, r)
			}
			l := e.listed()
			if len(l) != 1 {
				t.Fatalf("want the run kept: ls lists %v; %v", l, r)
			}
			var id string
			for k := range l {
				id = k
			}
			ref := c.named
			if ref == "" {
				ref = id
				// Its id was never shown before: the user learns it here.
				if !strings.Contains(r.stderr, id) {
					t.Errorf("stderr does not name the kept sandbox %s: %v", id, r)
				}
			}
			if r := e.run("get", ref); r.code != 0 || !strings.Contains(r.stdout, id) {
				t.Errorf("get %s: %v", ref, r)
			}
		})
	}
}

func TestSandboxesShareOneCABundleThatIsReadOnlyInside(t *testing.T) {
	e := newEnv(t)
	var inside []string
	for i := range 2 {
		r := e.run("run", "-d", "-q", "--name", fmt.Sprintf("sb%d", i), "--allow-host", "example.com")
		if r.code != 0 {
			t.Fatalf("run -d: %v", r)
		}
		// The bundle's inode, the system path covered by it, and whether a
		// write (or a chmod to make one possible) gets through.
		x := e.run("exec", fmt.Sprintf("sb%d", i), "--", "sh", "-c", `
			stat -Lc %i /run/airlock/ca-bundle.pem
			stat -Lc %i /etc/ssl/certs/ca-certificates.crt
			if echo tampered >> /run/airlock/ca-bundle.pem; then echo WROTE; fi
			if chmod 666 /run/airlock/ca-bundle.pem; then echo CHMOD; fi
			grep -c 'BEGIN CERTIFICATE' /run/airlock/ca-bundle.pem`)
		if x.code != 0 {
			t.Fatalf("exec: %v", x)
		}
		inside = append(inside, x.stdout)
	}
	b := e.bundles()
	if len(b) != 1 {
		t.Fatalf("want one bundle for both sandboxes, got %v", b)
	}
	fi, err := os.Stat(b[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o444 {
		t.Errorf("the shared bundle's mode is %v, want 0444", fi.Mode())
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	for i, out := range inside {
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || lines[0] != fmt.Sprint(ino) || lines[1] != lines[0] || lines[2] == "0" {
			t.Errorf("sandbox %d: want the host's bundle (inode %d) read-only, unchanged and holding certificates; got %q", i, ino, out)
		}
	}
	data, _ := os.ReadFile(b[0])
	if strings.Contains(string(data), "tampered") {
		t.Error("a sandbox wrote into the shared bundle")
	}
	for _, id := range e.sandboxDirs() {
		if _, err := os.Stat(filepath.Join(e.state, "sandboxes", id, "ca-bundle.pem")); err == nil {
			t.Errorf("sandbox %s still has a private copy of the bundle", id)
		}
	}
}

// TestLsAndExecOverManyKeptSandboxes: a state dir with a few hundred
// stopped sandboxes (as a harness's kept runs leave) is still listed whole
// and in order, and a sandbox is still found by name and by id prefix.
func TestLsAndExecOverManyKeptSandboxes(t *testing.T) {
	e := newEnv(t)
	store, err := state.Open(e.state)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	code := 0
	for i := range n {
		h, err := store.Create(fmt.Sprintf("old-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC()
		if err := h.WriteRecord(state.Record{Backend: "native", Workspace: e.ws, Command: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(h.SetStatus(state.Status{State: state.Exited, ExitCode: &code, FinishedAt: &now}), h.Release()); err != nil {
			t.Fatal(err)
		}
	}
	r := e.run("run", "-d", "-q", "--name", "live")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(id) != 12 {
		t.Fatalf("run -d: %v", r)
	}
	l := e.listed()
	if len(l) != n+1 || l[id].Status.State != state.Running {
		t.Fatalf("ls lists %d sandboxes (want %d), the live one as %+v", len(l), n+1, l[id].Status)
	}
	if r := e.run("ls"); strings.Count(r.stdout, "\n") != n+2 || !strings.Contains(strings.SplitN(r.stdout, "\n", 3)[1], id) {
		t.Errorf("ls: want a header, the live sandbox first, then %d more: %v", n, r.stdout[:min(len(r.stdout), 400)])
	}
	for _, ref := range []string{"live", id, id[:5]} {
		if r := e.run("exec", ref, "--", "hostname"); r.code != 0 || strings.TrimSpace(r.stdout) != "airlock-"+id[:8] {
			t.Errorf("exec %s: %v", ref, r)
		}
	}
	if r := e.run("exec", "old-7", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "not running") {
		t.Errorf("exec of a stopped one: %v", r)
	}
}

// When a foreground run returns, nothing of its sandbox is left: not one of
// the many processes its command left in the background (not even as a
// zombie not yet reaped), and the (bind-mode) workspace is written no more;
// with a gateway (closed while the sandbox is torn down) and without.
func TestNothingACommandLeftRunningOutlivesItsRun(t *testing.T) {
	e := newEnv(t)
	for i, flags := range [][]string{nil, {"--allow-host", "example.com"}} {
		t.Run(fmt.Sprintf("flags %q", flags), func(t *testing.T) {
			log := fmt.Sprintf("bg%d.log", i)
			// A name of its own, seen in /proc/PID/stat even once it exited.
			comm := fmt.Sprintf("bgw%d-%d", os.Getpid()%100000, i)
			script := fmt.Sprintf(`cp /bin/sleep /tmp/%s
				for n in $(seq 100); do /tmp/%s 60 >/dev/null 2>&1 & done
				sh -c 'while :; do echo x >> %s; done' >/dev/null 2>&1 &
				while ! [ -s %s ]; do sleep 0.01; done; echo started`, comm, comm, log, log)
			r := e.sh(script, flags...)
			if pids := procsNamed(comm); len(pids) != 0 {
				t.Fatalf("%d of the command's background processes are left after airlock returned", len(pids))
			}
			if r.code != 0 || !strings.Contains(r.stdout, "started") {
				t.Fatalf("run: %v", r)
			}
			before := e.read(log)
			if before == "" {
				t.Fatal("the background writer wrote nothing (positive control)")
			}
			time.Sleep(100 * time.Millisecond) // many of its writes, had it lived
			if after := e.read(log); after != before {
				t.Fatalf("%s grew after airlock returned: %d bytes, then %d", log, len(before), len(after))
			}
		})
	}
}

// procsNamed lists the processes whose command name (/proc/PID/stat's,
// kept until a process is reaped) is comm.
func procsNamed(comm string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		if _, rest, ok := strings.Cut(string(b), " ("); ok && strings.HasPrefix(rest, comm+") ") {
			pid, _ := strconv.Atoi(d.Name())
			out = append(out, pid)
		}
	}
	return out
}

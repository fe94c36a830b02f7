package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func openTemp(t *testing.T, redact func(string) string) (*Log, string) {
	t.Helper()
	return openTempWith(t, redact, Options{})
}

// unbounded writes every record to one file: for tests of what the bounds sit on.
var unbounded = Options{MaxBytes: -1, Interval: -1, MaxKeys: -1}

func openTempWith(t *testing.T, redact func(string) string, o Options) (*Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := OpenWith(path, "sb-1", redact, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, path
}

func readAll(t *testing.T, path string) (recs []Record, bad []int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = Read(f, func(r Record) error { recs = append(recs, r); return nil },
		func(line int, err error) { bad = append(bad, line) })
	if err != nil {
		t.Fatal(err)
	}
	return recs, bad
}

func TestRoundTrip(t *testing.T) {
	l, path := openTemp(t, nil)
	when := time.Date(2025, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
	in := []Record{
		{Time: when, Kind: "http", Subject: "api.example.com", Decision: "allow", Rule: "allow api.example.com",
			Host: "api.example.com", IP: "203.0.113.7", Port: 443, Method: "GET", Path: "/v1/x?a=<b>&c",
			Status: 200, BytesOut: 12, BytesIn: 3456, Duration: Millis(1500 * time.Microsecond),
			Extra: map[string]string{"sni": "api.example.com"}},
		{Kind: "exec", Subject: "make test", Decision: "allow"},
	}
	for _, r := range in {
		if err := l.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(path)
	if !bytes.Contains(raw, []byte(`"duration_ms":1.5`)) || !bytes.Contains(raw, []byte(`?a=<b>&c`)) {
		t.Errorf("want float milliseconds and unescaped HTML characters, got %s", raw)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}

	out, bad := readAll(t, path)
	if len(bad) != 0 || len(out) != 2 {
		t.Fatalf("got %d records, bad lines %v", len(out), bad)
	}
	want := in[0]
	want.Sandbox = "sb-1"
	if !out[0].Time.Equal(when) {
		t.Errorf("time %v, want %v", out[0].Time, when)
	}
	out[0].Time = want.Time
	if !reflect.DeepEqual(out[0], want) {
		t.Errorf("got  %+v\nwant %+v", out[0], want)
	}
	if out[1].Sandbox != "sb-1" || time.Since(out[1].Time) > time.Minute {
		t.Errorf("Time and Sandbox not filled: %+v", out[1])
	}
}

func TestWriteAfterClose(t *testing.T) {
	l, _ := openTemp(t, nil)
	ch, cancel := l.Subscribe(1)
	defer cancel()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(Record{Kind: "exec"}); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if _, ok := <-ch; ok {
		t.Error("subscriber channel not closed by Close")
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestTornLine: a writer killed mid-line must not take the next record with it.
func TestTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	os.WriteFile(path, []byte(`{"kind":"exec","subj`), 0o600)
	l, err := Open(path, "sb", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Write(Record{Kind: "dns"})
	l.Write(Record{Kind: "dns"})
	l.Close()
	recs, bad := readAll(t, path)
	if len(recs) != 2 || !reflect.DeepEqual(bad, []int{1}) {
		t.Errorf("got %d records, bad lines %v; want 2 and [1]", len(recs), bad)
	}
}

const helperEnv = "AIRLOCK_AUDIT_TEST_HELPER"

// TestHelperWriter is not a test: TestConcurrentWriters runs the test binary again
// with it selected, to be a second process appending to the same file.
func TestHelperWriter(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	path, rest, _ := strings.Cut(spec, "|")
	id, maxBytes, _ := strings.Cut(rest, "|")
	o := unbounded
	if maxBytes != "" { // rotating, keeping every file
		o.MaxBytes, _ = strconv.ParseInt(maxBytes, 10, 64)
		o.Keep = 1000
	}
	l, err := OpenWith(path, id, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := l.Write(record(id, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// record is large (several KiB, well over PIPE_BUF) so that torn or interleaved
// writes would show up as unparsable lines.
func record(writer string, i int) Record {
	return Record{Kind: "file", Decision: "allow", Subject: writer + "/" + strconv.Itoa(i),
		Path: strings.Repeat(string(rune('a'+i%26)), 1000+i*37)}
}

func TestConcurrentWriters(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip()
	}
	t.Run("one file", func(t *testing.T) { concurrentWriters(t, 0) })
	// Rotation by several processes at once: serialized, nothing lost or torn.
	t.Run("rotating every 256 KiB", func(t *testing.T) { concurrentWriters(t, 256<<10) })
}

func concurrentWriters(t *testing.T, maxBytes int64) {
	o := unbounded
	if maxBytes > 0 {
		o.MaxBytes, o.Keep = maxBytes, 1000
	}
	l, path := openTempWith(t, nil, o)
	const procs, goroutines, each = 4, 50, 100

	var cmds []*exec.Cmd
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
		spec := fmt.Sprintf("%s=%s|proc%d", helperEnv, path, p)
		if maxBytes > 0 {
			spec += "|" + strconv.FormatInt(maxBytes, 10)
		}
		cmd.Env = append(os.Environ(), spec)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(out.String())
			}
		})
		cmds = append(cmds, cmd)
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if err := l.Write(record("g"+strconv.Itoa(g), i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper: %v", err)
		}
	}

	var recs []Record
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		rs, bad := readAll(t, f)
		if len(bad) != 0 {
			t.Fatalf("%s: corrupt lines: %v", f, bad)
		}
		for _, r := range rs {
			if r.Kind != KindAudit {
				recs = append(recs, r)
			}
		}
	}
	if maxBytes > 0 {
		if len(files) < 10 {
			t.Errorf("only %d files: rotation did not happen", len(files))
		}
		for _, f := range files {
			// A line from another process may land after a rotation it raced with.
			if fi, _ := os.Stat(f); fi.Size() > maxBytes+procs*MaxLine {
				t.Errorf("%s has %d bytes, limit %d", f, fi.Size(), maxBytes)
			}
		}
	}
	if want := (procs + goroutines) * each; len(recs) != want {
		t.Fatalf("%d records, want %d", len(recs), want)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		w, i, _ := strings.Cut(r.Subject, "/")
		n, _ := strconv.Atoi(i)
		if want := record(w, n); r.Path != want.Path {
			t.Fatalf("record %s has a mangled path", r.Subject)
		}
		if seen[r.Subject] {
			t.Fatalf("duplicate %s", r.Subject)
		}
		seen[r.Subject] = true
	}
	if !seen["proc3/99"] || !seen["g49/99"] {
		t.Error("records from some writer are missing")
	}
}

func TestRedaction(t *testing.T) {
	const canary = "sk-CANARY-7f3a9c"
	redact := func(s string) string { return strings.ReplaceAll(s, canary, "[REDACTED]") }
	l, path := openTemp(t, redact)
	ch, cancel := l.Subscribe(10)
	defer cancel()

	r := Record{Sandbox: canary}
	for _, p := range stringFields(&r) {
		*p = "x" + canary + "y"
	}
	r.Extra = map[string]string{"authorization": "Bearer " + canary, "key-" + canary: "v"}
	r.Argv = []string{canary, "--token=" + canary, "plain"}
	caller := r.Extra["authorization"]
	if err := l.Write(r); err != nil {
		t.Fatal(err)
	}
	// A secret must be redacted before truncation, or cutting it would hide it from Redact.
	long := strings.Repeat("z", fieldCaps[0]-5) + canary
	if err := l.Write(Record{Kind: "exec", Subject: long, Extra: map[string]string{"v": long}}); err != nil {
		t.Fatal(err)
	}

	raw, _ := os.ReadFile(path)
	if bytes.Contains(raw, []byte(canary[:5])) {
		t.Fatalf("canary in file: %s", raw)
	}
	first, _, _ := bytes.Cut(raw, []byte{'\n'})
	if n, want := bytes.Count(first, []byte("[REDACTED]")), len(stringFields(&r))+4; n != want {
		t.Errorf("%d redactions, want %d (%d fields, two arguments, an Extra key and value)", n, want, want-4)
	}
	if r.Argv[1] != "--token="+canary {
		t.Error("Write changed the caller's Argv")
	}
	if r.Extra["authorization"] != caller {
		t.Error("Write changed the caller's Extra map")
	}
	for range 2 {
		ev := <-ch
		b, _ := json.Marshal(ev)
		if bytes.Contains(b, []byte(canary[:5])) {
			t.Fatalf("canary in event: %s", b)
		}
	}
}

func TestTruncation(t *testing.T) {
	l, path := openTemp(t, nil)
	huge := strings.Repeat("é", 200<<10)  // multi-byte, so cuts must respect rune boundaries
	ctl := strings.Repeat("\x01", 20<<10) // JSON escapes each to six bytes
	extra := map[string]string{}
	for i := range 2000 {
		extra[fmt.Sprintf("k%04d", i)] = strings.Repeat("v", 100)
	}
	recs := []Record{
		{Kind: "exec", Subject: huge},
		{Kind: "exec", Subject: ctl, Reason: ctl, Path: ctl, Rule: ctl, Host: ctl, Method: ctl, IP: ctl},
		{Kind: "mcp", Subject: "many", Extra: extra},
		{Kind: huge, Sandbox: huge, Subject: huge, Decision: huge, Rule: huge, Reason: huge,
			Host: huge, IP: huge, Method: huge, Path: huge, Extra: map[string]string{huge: huge}},
	}
	for _, r := range recs {
		if err := l.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := os.Open(path)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	n := 0
	for sc.Scan() {
		if len(sc.Bytes())+1 > MaxLine {
			t.Errorf("line %d is %d bytes, limit %d", n+1, len(sc.Bytes())+1, MaxLine)
		}
		n++
	}
	got, bad := readAll(t, path)
	if n != 4 || len(got) != 4 || len(bad) != 0 {
		t.Fatalf("lines %d, records %d, bad %v", n, len(got), bad)
	}
	if s := got[0].Subject; !strings.HasPrefix(s, "éé") || !strings.HasSuffix(s, "bytes]") ||
		!strings.Contains(s, "…[truncated ") || strings.ContainsRune(s, '\uFFFD') {
		t.Errorf("bad truncation: ...%s", s[len(s)-40:])
	}
	// Too many keys to fit at any field length: Extra gives way, the record stays.
	if want := map[string]string{"truncated": "2000 extra fields dropped"}; !reflect.DeepEqual(got[2].Extra, want) {
		t.Errorf("extra: %d keys", len(got[2].Extra))
	}
	if len(got[3].Extra) != 1 || got[3].Extra["truncated"] != "" {
		t.Errorf("extra: %d keys", len(got[3].Extra))
	}
}

func TestReadCorrupt(t *testing.T) {
	long := `{"kind":"exec","subject":"` + strings.Repeat("x", maxReadLine) + `"}`
	input := strings.Join([]string{
		`{"time":"2025-01-01T00:00:00Z","sandbox":"a","kind":"exec"}`, // 1 ok
		`not json`,                           // 2
		``,                                   // 3 blank: skipped silently
		`{"kind":"dns","port":"x"}`,          // 4 wrong type
		long,                                 // 5 too long
		`null`,                               // 6
		`{}`,                                 // 7 no kind
		`{"kind":"dns","duration_ms":1e300}`, // 8 out of range
		`{"kind":"dns","duration_ms":2.25}`,  // 9 ok
		`{"kind":"network","subj`,            // 10 torn last line, no newline
	}, "\n")
	var got []Record
	var bad []int
	err := Read(strings.NewReader(input), func(r Record) error { got = append(got, r); return nil },
		func(line int, err error) { bad = append(bad, line) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 4, 5, 6, 7, 8, 10}; !reflect.DeepEqual(bad, want) {
		t.Errorf("bad lines %v, want %v", bad, want)
	}
	if len(got) != 2 || got[1].Duration.Duration() != 2250*time.Microsecond {
		t.Errorf("records %+v", got)
	}

	// A line of exactly the limit is kept; fn's error stops reading and is returned.
	exact := `{"kind":"exec","subject":"` + strings.Repeat("x", maxReadLine-28) + `"}`
	if len(exact) != maxReadLine {
		t.Fatalf("exact line is %d", len(exact))
	}
	stop := errors.New("stop")
	calls := 0
	err = Read(strings.NewReader(exact+"\n"+exact+"\n"), func(Record) error { calls++; return stop }, nil)
	if err != stop || calls != 1 {
		t.Errorf("err %v after %d calls", err, calls)
	}
}

func TestFollow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl") // not created yet: Follow waits
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Record, 100)
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, path, func(r Record) error { got <- r; return nil }, nil)
	}()

	l, err := Open(path, "sb", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Write(Record{Kind: "exec", Subject: "one"})
	expect := func(subject string) {
		t.Helper()
		select {
		case r := <-got:
			if r.Subject != subject {
				t.Fatalf("got %q, want %q", r.Subject, subject)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no record %q", subject)
		}
	}
	expect("one")
	// A record arriving in two pieces is delivered once, whole.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"kind":"exec","subject":"tw`)
	time.Sleep(3 * pollInterval / 2)
	f.WriteString("o\"}\n")
	f.Close()
	expect("two")
	l.Write(Record{Kind: "exec", Subject: "three"})
	expect("three")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Follow after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not stop on cancel")
	}
	if len(got) != 0 {
		t.Errorf("unexpected extra record %+v", <-got)
	}
}

func TestFollowStop(t *testing.T) {
	l, path := openTemp(t, nil)
	l.Write(Record{Kind: "exec", Subject: "before"})
	var mu sync.Mutex
	stopped := false
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- Follow(context.Background(), path, func(r Record) error {
			mu.Lock()
			got = append(got, r.Subject)
			mu.Unlock()
			return nil
		}, func() bool { mu.Lock(); defer mu.Unlock(); return stopped })
	}()
	time.Sleep(pollInterval / 2)
	// Written just before stop turns true: must still be delivered.
	l.Write(Record{Kind: "exec", Subject: "last"})
	mu.Lock()
	stopped = true
	mu.Unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not stop")
	}
	if !reflect.DeepEqual(got, []string{"before", "last"}) {
		t.Errorf("got %v", got)
	}

	// fn's error ends Follow.
	boom := errors.New("boom")
	if err := Follow(context.Background(), path, func(Record) error { return boom }, nil); err != boom {
		t.Errorf("err %v, want boom", err)
	}
}

func TestSubscribe(t *testing.T) {
	l, _ := openTempWith(t, nil, unbounded) // 2000 distinct records: all must be sent
	live, cancelLive := l.Subscribe(16)
	_, cancelSlow := l.Subscribe(1) // never read
	defer cancelSlow()

	l.Write(Record{Kind: "dns", Subject: "example.com", Decision: "allow"})
	select {
	case r := <-live:
		if r.Subject != "example.com" || r.Sandbox != "sb-1" || r.Time.IsZero() {
			t.Errorf("event %+v", r)
		}
	case <-time.After(time.Second):
		t.Fatal("no live event")
	}

	// A Write blocked on the stuck subscriber would never return; the timeout turns
	// that into a failure rather than a hung test. The latency bound is loose because
	// a loaded CI machine can stall any single write(2).
	const n = 2000
	var worst time.Duration
	finished := make(chan error, 1)
	go func() {
		for i := range n {
			start := time.Now()
			if err := l.Write(Record{Kind: "dns", Subject: strconv.Itoa(i)}); err != nil {
				finished <- err
				return
			}
			worst = max(worst, time.Since(start))
			if i%10 == 0 { // keep the live subscriber drained so only the slow one drops
				for len(live) > 0 {
					<-live
				}
			}
		}
		finished <- nil
	}()
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Write blocked behind a subscriber that never reads")
	}
	if worst > time.Second {
		t.Errorf("slowest Write took %v with a stuck subscriber", worst)
	}
	// The slow subscriber held 1 of n+1 records (the first); the live one dropped none.
	if d := l.Dropped(); d != n {
		t.Errorf("dropped %d, want %d", d, n)
	}

	cancelLive()
	cancelLive() // idempotent
	for range live {
	}
	l.Write(Record{Kind: "dns"}) // no panic sending to a cancelled subscriber
}

func TestMillisJSON(t *testing.T) {
	for _, d := range []time.Duration{0, time.Nanosecond, 1500 * time.Microsecond, 3 * time.Hour, -time.Millisecond} {
		b, _ := json.Marshal(Millis(d))
		var m Millis
		if err := json.Unmarshal(b, &m); err != nil || m.Duration() != d {
			t.Errorf("%v -> %s -> %v (%v)", d, b, m.Duration(), err)
		}
	}
}

func TestFormat(t *testing.T) {
	at := time.Date(2025, 1, 2, 15, 4, 5, 123_456_789, time.Local)
	cases := []struct {
		r            Record
		plain, color string
	}{
		{
			Record{Time: at, Kind: "http", Decision: "deny", Subject: "evil.example", Method: "POST", Path: "/upload",
				Status: 403, Rule: "default deny", Reason: "host not in allowlist"},
			"DENY 15:04:05.123 http      deny    evil.example POST /upload 403 [default deny] host not in allowlist",
			"\x1b[1;31m15:04:05.123 http      deny    evil.example POST /upload 403 [default deny] host not in allowlist\x1b[0m",
		},
		{
			Record{Time: at, Kind: "network", Decision: "allow", Host: "api.example.com", Port: 443, Rule: "api.example.com"},
			"     15:04:05.123 network   allow   api.example.com:443 [api.example.com]",
			"\x1b[2m15:04:05.123 network   allow   api.example.com:443 [api.example.com]\x1b[0m",
		},
		{
			Record{Time: at, Kind: "dns", Decision: "allow", Host: "api.example.com", IP: "198.18.0.1", Extra: map[string]string{"qtype": "A"}, Rule: "api.example.com"},
			"     15:04:05.123 dns       allow   api.example.com A -> 198.18.0.1 [api.example.com]",
			"\x1b[2m15:04:05.123 dns       allow   api.example.com A -> 198.18.0.1 [api.example.com]\x1b[0m",
		},
		{
			Record{Time: at, Kind: "llm", Decision: "allow", Host: "api.anthropic.com", Subject: "claude-sonnet-4-5", Method: "POST", Path: "/v1/messages", Status: 200,
				Extra: map[string]string{"tokens": "1130", "usd": "0.0042", "total_tokens": "2260", "total_usd": "0.0084"}},
			"     15:04:05.123 llm       allow   api.anthropic.com claude-sonnet-4-5 POST /v1/messages 1130 tokens $0.0042 (sandbox: 2260 tokens, $0.0084) 200",
			"\x1b[2m15:04:05.123 llm       allow   api.anthropic.com claude-sonnet-4-5 POST /v1/messages 1130 tokens $0.0042 (sandbox: 2260 tokens, $0.0084) 200\x1b[0m",
		},
		{
			Record{Time: at, Kind: "approval", Decision: "ask", Subject: "git push"},
			"     15:04:05.123 approval  ask     git push",
			"\x1b[33m15:04:05.123 approval  ask     git push\x1b[0m",
		},
		{
			Record{Time: at, Kind: "http", Decision: "secret_blocked", Subject: "paste.example", Reason: "GITHUB_TOKEN placeholder"},
			"DENY 15:04:05.123 http      secret_blocked paste.example GITHUB_TOKEN placeholder",
			"\x1b[1;31m15:04:05.123 http      secret_blocked paste.example GITHUB_TOKEN placeholder\x1b[0m",
		},
		{
			Record{Time: at, Kind: "hostexec", Decision: "error", Subject: "gh", Reason: "exit 1"},
			"ERR  15:04:05.123 hostexec  error   gh exit 1",
			"\x1b[1;31m15:04:05.123 hostexec  error   gh exit 1\x1b[0m",
		},
		{
			Record{Time: at, Kind: "workspace", IP: "2001:db8::1", Port: 53},
			"     15:04:05.123 workspace         [2001:db8::1]:53",
			"15:04:05.123 workspace         [2001:db8::1]:53",
		},
		{
			withTime(ExecExit([]string{"go", "test", "./...", "-run", "Test It's"}, 2, 1234567*time.Microsecond), at),
			"     15:04:05.123 exec              go test ./... -run 'Test It'\\''s' exit 2 1.235s",
			"15:04:05.123 exec              go test ./... -run 'Test It'\\''s' exit 2 1.235s",
		},
		{
			withTime(File(OpWrite, "/work/main.go"), at),
			"     15:04:05.123 file              write /work/main.go",
			"15:04:05.123 file              write /work/main.go",
		},
		{
			withTime(Workspace(OpReview, "apply", 3, 8, 1), at),
			"     15:04:05.123 workspace apply   review +3 ~8 -1",
			"15:04:05.123 workspace apply   review +3 ~8 -1",
		},
		{
			withTime(Lifecycle(OpCrash, "docker", "exit status 137"), at),
			"ERR  15:04:05.123 lifecycle error   crash docker exit status 137",
			"\x1b[1;31m15:04:05.123 lifecycle error   crash docker exit status 137\x1b[0m",
		},
		{
			Record{Time: at, Kind: "dns", Decision: "deny", Host: "same.example", Extra: map[string]string{"qtype": "A"},
				Count: 29999, Since: at.Add(-time.Second)},
			"DENY 15:04:05.123 dns       deny    same.example A (×29999 since 15:04:04.123)",
			"\x1b[1;31m15:04:05.123 dns       deny    same.example A (×29999 since 15:04:04.123)\x1b[0m",
		},
		{
			Record{Time: at, Kind: KindAudit, Decision: DecisionSuppressed, Subject: "dns deny", Count: 5, Reason: "5 more"},
			"     15:04:05.123 audit     suppressed dns deny 5 more",
			"15:04:05.123 audit     suppressed dns deny 5 more",
		},
		{
			// Sandbox-controlled text must not reach the terminal as escape sequences.
			Record{Time: at, Kind: "file", Decision: "deny", Path: "/tmp/\x1b[2J\u202eevil\xff\n"},
			`DENY 15:04:05.123 file      deny    /tmp/\x1b[2J\u202eevil\xff\x0a`,
			"\x1b[1;31m15:04:05.123 file      deny    /tmp/\\x1b[2J\\u202eevil\\xff\\x0a\x1b[0m",
		},
	}
	for _, c := range cases {
		if got := Format(c.r, false); got != c.plain {
			t.Errorf("plain:\n got %q\nwant %q", got, c.plain)
		}
		if got := Format(c.r, true); got != c.color {
			t.Errorf("color:\n got %q\nwant %q", got, c.color)
		}
	}
}

func withTime(r Record, at time.Time) Record {
	r.Time = at
	return r
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"kind":"exec","time":"2025-01-01T00:00:00Z"}` + "\n" + `{"kind":"dns","duration_ms":1e400}`))
	f.Add([]byte("\n\n{\"kind\":\"x\",\"extra\":{\"a\":\"b\"}}\r\nnull\n{"))
	f.Add([]byte(`{"kind":"x","port":1e99,"time":"bogus"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte{'\n'}) + 1
		last := 0
		err := Read(bytes.NewReader(data), func(r Record) error {
			if r.Kind == "" {
				t.Fatal("record without kind delivered")
			}
			Format(r, true)
			return nil
		}, func(line int, err error) {
			if line <= last || line > lines || err == nil {
				t.Fatalf("bad report: line %d (previous %d, of %d): %v", line, last, lines, err)
			}
			last = line
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzWrite checks that whatever strings a sandbox produces, the line written is
// bounded and reads back as exactly one record.
func FuzzWrite(f *testing.F) {
	f.Add("exec", "make", "\x00\xff\u2028", 3)
	f.Fuzz(func(t *testing.T, kind, subject, extra string, rep int) {
		if kind == "" {
			kind = "k"
		}
		rep = max(0, min(rep, 2000))
		r := Record{Kind: kind, Subject: strings.Repeat(subject, rep), Extra: map[string]string{extra: extra},
			Argv: slices.Repeat([]string{subject, extra}, rep)}
		_, line, err := encode(applyRedact(r, nil))
		if err != nil {
			t.Fatal(err)
		}
		if len(line) > MaxLine || bytes.Count(line, []byte{'\n'}) != 1 {
			t.Fatalf("line of %d bytes", len(line))
		}
		n := 0
		if err := Read(bytes.NewReader(line), func(Record) error { n++; return nil },
			func(_ int, err error) { t.Fatal(err) }); err != nil || n != 1 {
			t.Fatalf("read back %d records: %v", n, err)
		}
	})
}

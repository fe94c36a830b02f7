package audit

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// tally counts what the lines stand for: records (a line with Count stands for Count)
// and records suppressed over the cap (kind audit, decision suppressed).
func tally(recs []Record) (written, suppressed int) {
	for _, r := range recs {
		switch {
		case r.Kind == KindAudit && r.Decision == DecisionSuppressed:
			suppressed += r.Count
		case r.Kind == KindAudit:
		default:
			written += max(r.Count, 1)
		}
	}
	return written, suppressed
}

func dnsRecord(name string) Record {
	return Record{Kind: KindDNS, Host: name, Decision: Deny, Rule: "default deny",
		Reason: "not in the allowlist; answered NXDOMAIN, not forwarded", Extra: map[string]string{"qtype": "A"}}
}

// hour is an interval no test outlasts: what is counted is written by Close.
var hour = Options{Interval: time.Hour}

func TestFlood(t *testing.T) {
	const n = 30_000
	cases := map[string]struct {
		names     func(i int) string
		maxLines  int
		wantCount int // Count of the one aggregated record, if any
		wantSupp  int // records suppressed over the cap
	}{
		"30,000 identical lookups make one line at once and one with the count at the end": {
			names: func(int) string { return "same.example" }, maxLines: 2, wantCount: n - 1,
		},
		"30,000 distinct lookups write MaxKeys lines and one that says the rest were suppressed": {
			names: func(i int) string { return "r" + strconv.Itoa(i) + ".x.test" }, maxLines: DefaultMaxKeys + 1, wantSupp: n - DefaultMaxKeys,
		},
		"30,000 identical then 30,000 distinct lookups stay as bounded": {
			names: func(i int) string {
				if i < n/2 {
					return "same.example"
				}
				return "r" + strconv.Itoa(i) + ".x.test"
			},
			maxLines: DefaultMaxKeys + 2, wantCount: n/2 - 1, wantSupp: n/2 - (DefaultMaxKeys - 1),
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l, path := openTempWith(t, nil, hour)
			for i := range n {
				if err := l.Write(dnsRecord(c.names(i))); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := readAll(t, path)
			if before[0].Host != c.names(0) || before[0].Count != 0 {
				t.Errorf("first line %+v, want the first lookup itself", before[0])
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			recs, bad := readAll(t, path)
			fi, _ := os.Stat(path)
			if len(bad) != 0 || len(recs) > c.maxLines || fi.Size() > int64(c.maxLines)*400 {
				t.Fatalf("%d lines, %d bytes (bad %v); want at most %d lines of 400 bytes", len(recs), fi.Size(), bad, c.maxLines)
			}
			written, suppressed := tally(recs)
			if written+suppressed != n || suppressed != c.wantSupp {
				t.Errorf("lines stand for %d written + %d suppressed, want %d + %d", written, suppressed, n-c.wantSupp, c.wantSupp)
			}
			var agg, supp *Record
			for i, r := range recs {
				switch {
				case r.Count > 0 && r.Kind == KindDNS:
					agg = &recs[i]
				case r.Decision == DecisionSuppressed:
					supp = &recs[i]
				}
			}
			if c.wantCount > 0 && (agg == nil || agg.Count != c.wantCount || agg.Host != "same.example" || agg.Since.IsZero()) {
				t.Errorf("aggregated record %+v, want count %d", agg, c.wantCount)
			}
			if c.wantSupp > 0 {
				if supp == nil || supp.Subject != "dns deny" || supp.Distinct != c.wantSupp ||
					!strings.Contains(supp.Reason, fmt.Sprintf("%d more dns deny records (%d distinct)", c.wantSupp, c.wantSupp)) {
					t.Errorf("suppressed record %+v", supp)
				}
			} else if supp != nil {
				t.Errorf("unexpected %+v", supp)
			}
		})
	}
}

// TestFloodInRealTime floods with the default one-second interval, for as many
// intervals as a slow (race-enabled) run takes: the bound is per interval.
func TestFloodInRealTime(t *testing.T) {
	l, path := openTemp(t, nil)
	start := time.Now()
	const n = 60_000
	for i := range n {
		name := "same.example"
		if i%2 == 1 {
			name = "r" + strconv.Itoa(i) + ".x.test"
		}
		l.Write(dnsRecord(name))
	}
	intervals := int(time.Since(start)/DefaultInterval) + 1
	l.Close()
	recs, _ := readAll(t, path)
	if limit := intervals * (2*DefaultMaxKeys + 1); len(recs) > limit {
		t.Errorf("%d lines over %d intervals, want at most %d", len(recs), intervals, limit)
	}
	if w, s := tally(recs); w+s != n {
		t.Errorf("lines stand for %d + %d records, want %d", w, s, n)
	}
}

func TestWhatIsWrittenAtOnce(t *testing.T) {
	net := func(host string, port int, bytes int64) Record {
		return Record{Kind: KindNetwork, Decision: Allow, Host: host, Port: port, BytesOut: bytes, BytesIn: bytes}
	}
	cases := map[string]struct {
		in   []Record
		now  []string // Host/Subject/Op of the lines written before Close
		more int      // lines Close adds
	}{
		"the first record of each key is written at once, repeats wait": {
			in:  []Record{dnsRecord("a"), dnsRecord("b"), dnsRecord("a"), dnsRecord("c"), dnsRecord("a")},
			now: []string{"a", "b", "c"}, more: 1,
		},
		"a different decision, rule or port is a different key": {
			in: []Record{{Kind: KindNetwork, Host: "h", Port: 443, Decision: Deny}, {Kind: KindNetwork, Host: "h", Port: 443, Decision: Error},
				{Kind: KindNetwork, Host: "h", Port: 80, Decision: Deny}, {Kind: KindNetwork, Host: "h", Port: 443, Decision: Deny, Rule: "r"}},
			now: []string{"h", "h", "h", "h"},
		},
		"connections that moved bytes are kept exact even when identical": {
			in:  []Record{net("h", 443, 10), net("h", 443, 10), net("h", 443, 0), net("h", 443, 0)},
			now: []string{"h", "h", "h"}, more: 1,
		},
		"exec, workspace and lifecycle records are never merged": {
			in: []Record{ExecExit([]string{"make"}, 0, time.Second), ExecExit([]string{"make"}, 0, time.Second),
				Workspace(OpApply, "apply", 1, 2, 3), Workspace(OpApply, "apply", 1, 2, 3),
				Lifecycle(OpStart, "native", ""), Lifecycle(OpStart, "native", "")},
			now: []string{"make", "make", OpApply, OpApply, OpStart, OpStart},
		},
		"the first secret_blocked toward each host is written past the cap": {
			in: func() []Record {
				var rs []Record
				for i := range 10 {
					rs = append(rs, Record{Kind: KindHTTP, Decision: SecretBlocked, Host: "a", Path: "/" + strconv.Itoa(i)})
				}
				return append(rs, Record{Kind: KindHTTP, Decision: SecretBlocked, Host: "b", Path: "/"},
					Record{Kind: KindHTTP, Decision: SecretBlocked, Host: "b", Path: "/other"})
			}(),
			now: []string{"a", "a", "a", "b"}, more: 1,
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			o := hour
			o.MaxKeys = 3
			l, path := openTempWith(t, nil, o)
			events, cancel := l.Subscribe(100)
			defer cancel()
			for _, r := range c.in {
				if err := l.Write(r); err != nil {
					t.Fatal(err)
				}
			}
			recs, _ := readAll(t, path)
			var got []string
			for _, r := range recs {
				got = append(got, cmp.Or(r.Host, r.Subject, r.Op))
			}
			if strings.Join(got, " ") != strings.Join(c.now, " ") {
				t.Errorf("written at once: %v, want %v", got, c.now)
			}
			if len(events) != len(recs) {
				t.Errorf("%d events for %d lines", len(events), len(recs))
			}
			l.Close()
			all, _ := readAll(t, path)
			if len(all)-len(recs) != c.more {
				t.Errorf("Close wrote %d lines, want %d: %+v", len(all)-len(recs), c.more, all[len(recs):])
			}
			if w, s := tally(all); w+s != len(c.in) {
				t.Errorf("lines stand for %d + %d records, want %d", w, s, len(c.in))
			}
			n := 0
			for range events {
				n++
			}
			if n != len(all) {
				t.Errorf("%d events for %d lines: subscribers must see what the file has", n, len(all))
			}
		})
	}
}

// TestIntervalEnds: counts reach the file when the interval ends, with no further
// write and no Close.
func TestIntervalEnds(t *testing.T) {
	l, path := openTempWith(t, nil, Options{Interval: 50 * time.Millisecond, MaxKeys: 1})
	for range 3 {
		l.Write(dnsRecord("a"))
		l.Write(dnsRecord("b"))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs, _ := readAll(t, path)
		if len(recs) == 3 {
			if recs[1].Count != 2 || recs[2].Decision != DecisionSuppressed || recs[2].Count != 3 || recs[2].Distinct != 1 {
				t.Errorf("%+v", recs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines after 5s, want 3", len(recs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The next interval starts afresh: a new first line at once.
	l.Write(dnsRecord("a"))
	if recs, _ := readAll(t, path); len(recs) != 4 || recs[3].Count != 0 {
		t.Errorf("%d lines, want the lookup written at once", len(recs))
	}
}

func TestFlushAndClose(t *testing.T) {
	l, path := openTempWith(t, nil, hour)
	l.Write(dnsRecord("a"))
	l.Write(dnsRecord("a"))
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	l.Write(dnsRecord("a")) // a new interval: written, not counted
	l.Write(dnsRecord("a"))
	l.Write(dnsRecord("a"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	recs, _ := readAll(t, path)
	var counts []int
	for _, r := range recs {
		counts = append(counts, r.Count)
	}
	if fmt.Sprint(counts) != "[0 1 0 2]" {
		t.Errorf("counts %v, want [0 1 0 2]", counts)
	}
	if err := l.Flush(); err == nil {
		t.Error("Flush after Close succeeded")
	}
}

// TestConcurrentFlood: many writers and the interval timer at once, under -race;
// nothing is lost or counted twice, and subscribers see what the file has.
func TestConcurrentFlood(t *testing.T) {
	l, path := openTempWith(t, nil, Options{Interval: 20 * time.Millisecond, MaxKeys: 50, MaxBytes: 64 << 10, Keep: 1000})
	events, cancel := l.Subscribe(1 << 20)
	defer cancel()
	const writers, each = 8, 3000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				switch i % 3 {
				case 0:
					l.Write(dnsRecord("same"))
				case 1:
					l.Write(dnsRecord(fmt.Sprintf("w%d-%d", w, i)))
				default:
					l.Write(Record{Kind: KindNetwork, Decision: Allow, Host: "h", BytesIn: int64(i)})
				}
			}
		})
	}
	wg.Wait()
	l.Close()
	var all []Record
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		recs, bad := readAll(t, f)
		if len(bad) > 0 {
			t.Fatalf("%s: bad lines %v", f, bad)
		}
		all = append(all, recs...)
	}
	if w, s := tally(all); w+s != writers*each {
		t.Errorf("lines stand for %d + %d records, want %d", w, s, writers*each)
	}
	n := 0
	for range events {
		n++
	}
	if n != len(all) || l.Dropped() != 0 {
		t.Errorf("%d events (%d dropped) for %d lines", n, l.Dropped(), len(all))
	}
}

func TestRotation(t *testing.T) {
	const maxBytes, keep, n = 4 << 10, 2, 300
	l, path := openTempWith(t, nil, Options{MaxBytes: maxBytes, Keep: keep, Interval: -1})
	events, cancel := l.Subscribe(1000)
	defer cancel()
	for i := range n {
		if err := l.Write(ExecExit([]string{"step", strconv.Itoa(i)}, 0, time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()

	files, _ := filepath.Glob(path + "*")
	if len(files) != keep+1 {
		t.Fatalf("files %v, want %s and %d rotated", files, path, keep)
	}
	onDisk := 0
	for _, f := range files {
		fi, _ := os.Stat(f)
		if fi.Size() > maxBytes {
			t.Errorf("%s has %d bytes, limit %d", f, fi.Size(), maxBytes)
		}
		recs, bad := readAll(t, f)
		if len(bad) > 0 || recs[0].Kind != KindAudit || recs[0].Decision != DecisionRotated {
			t.Errorf("%s starts with %+v (bad %v), want the rotation record", f, recs[0], bad)
		}
		onDisk += len(recs)
	}
	// Every line ever written is on disk or counted by a rotation record as removed.
	lines, removed := 0, 0
	for r := range events {
		lines++
		if r.Decision == DecisionRotated {
			removed += r.Count
		}
	}
	if onDisk+removed != lines || lines < n {
		t.Errorf("%d lines on disk + %d removed, want %d written", onDisk, removed, lines)
	}
	last, _ := readAll(t, path)
	if !strings.Contains(last[0].Reason, "renamed audit.jsonl.1; audit.jsonl.2 was removed (") {
		t.Errorf("rotation record: %s", last[0].Reason)
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	l, path := openTempWith(t, nil, Options{MaxBytes: 2 << 10, Keep: 50, Interval: -1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- Follow(ctx, path, func(r Record) error {
			mu.Lock()
			defer mu.Unlock()
			if r.Kind == KindExec {
				got = append(got, r.Subject)
			}
			return nil
		}, nil)
	}()
	const n = 200
	for i := range n {
		l.Write(Exec([]string{strconv.Itoa(i)}))
		if i%50 == 0 { // now one rotation between two polls, now several
			time.Sleep(3 * pollInterval / 2)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * pollInterval) // anything duplicated would have arrived by now
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Fatalf("Follow saw %d records, want %d", len(got), n)
	}
	for i, s := range got {
		if s != strconv.Itoa(i) {
			t.Fatalf("record %d is %q: lost, repeated or out of order", i, s)
		}
	}
	if files, _ := filepath.Glob(path + ".*"); len(files) < 10 {
		t.Errorf("only %d rotations", len(files))
	}
}

func TestHugeArgv(t *testing.T) {
	l, path := openTemp(t, nil)
	many := make([]string, 1_000_000) // empty arguments still cost bytes
	long := make([]string, 2000)
	for i := range long {
		long[i] = strings.Repeat("\x01", 10_000) // JSON escapes each to six bytes
	}
	for _, argv := range [][]string{many, long} {
		if err := l.Write(ExecExit(argv, 1, time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(path)
	for i, line := range strings.SplitAfter(strings.TrimSuffix(string(raw), "\n"), "\n") {
		if len(line) > MaxLine {
			t.Errorf("line %d is %d bytes", i+1, len(line))
		}
	}
	recs, bad := readAll(t, path)
	if len(recs) != 2 || len(bad) > 0 {
		t.Fatalf("%d records, bad %v", len(recs), bad)
	}
	for _, r := range recs {
		if last := r.Argv[len(r.Argv)-1]; !strings.HasSuffix(last, " more arguments]") || *r.ExitCode != 1 {
			t.Errorf("argv ends %q, exit %v", last, r.ExitCode)
		}
	}
}

func TestFilesListsRotatedFilesOldestFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if got := Files(path); len(got) != 1 || got[0] != path {
		t.Fatalf("Files(no rotation) = %v, want just %s", got, path)
	}
	for _, p := range []string{path, path + ".1", path + ".2"} {
		os.WriteFile(p, nil, 0o600)
	}
	if got, want := Files(path), []string{path + ".2", path + ".1", path}; !slices.Equal(got, want) {
		t.Fatalf("Files = %v, want %v", got, want)
	}
}

// A rotation renames path.k to path.k+1 oldest first: while it runs there
// is a hole among the names, and the file Follow read last may lie past
// it. Taking the hole for the end made Follow skip to the live file and
// lose every rotated file between (seen on a loaded CI machine).
func TestIndexOfLooksPastTheHoleARotationLeaves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, k := range []int{1, 3} { // path.2 is being renamed to path.3
		if err := os.WriteFile(path+"."+strconv.Itoa(k), []byte(strconv.Itoa(k)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path + ".3")
	if err != nil {
		t.Fatal(err)
	}
	if k := indexOf(path, fi); k != 3 {
		t.Errorf("indexOf = %d past a one-name hole, want 3", k)
	}
	if err := os.Rename(path+".3", path+".4"); err != nil { // two names missing: the end
		t.Fatal(err)
	}
	if fi, _ = os.Stat(path + ".4"); indexOf(path, fi) != 0 {
		t.Errorf("indexOf looked past two missing names")
	}
}

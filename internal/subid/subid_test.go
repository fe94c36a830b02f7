package subid

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []Entry
		wantErr bool
	}{
		"lines with comments and blanks": {
			in:   "# users\nalice:100000:65536\n\nairlock:165536:131072\n",
			want: []Entry{{"alice", 100000, 65536}, {"airlock", 165536, 131072}},
		},
		"a line without its count is an error":     {in: "alice:100000\n", wantErr: true},
		"a count that is not a number is an error": {in: "alice:1:many\n", wantErr: true},
		"an id beyond 32 bits is an error":         {in: "alice:4294967296:1\n", wantErr: true},
		"an empty file has no entries":             {in: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Parse(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Parse(%q) = %v, want %v", tc.in, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("Parse(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestFreeStart(t *testing.T) {
	tests := map[string]struct {
		files  [][]Entry
		count  uint32
		want   uint32
		wantOK bool
	}{
		"empty files start at the first slot above 100000": {count: SlotSize, want: 131072, wantOK: true},
		"above every entry of either file, slot-aligned": {
			files:  [][]Entry{{{"alice", 100000, 65536}}, {{"bob", 300000, 65536}}},
			count:  SlotSize,
			want:   393216, // 365536 rounded up to a multiple of 65536
			wantOK: true,
		},
		"no room below 2^32 is not ok": {
			files: [][]Entry{{{"all", 0, 4294000000}}},
			count: 16 * SlotSize,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := FreeStart(tc.count, tc.files...)
			if ok != tc.wantOK || (ok && got != tc.want) {
				t.Errorf("FreeStart(%d, %v) = %d, %v; want %d, %v", tc.count, tc.files, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func testPaths(t *testing.T, subuid, subgid string) Paths {
	t.Helper()
	dir := t.TempDir()
	p := Paths{SubUID: filepath.Join(dir, "subuid"), SubGID: filepath.Join(dir, "subgid"), LockDir: filepath.Join(dir, "locks")}
	for f, text := range map[string]string{p.SubUID: subuid, p.SubGID: subgid} {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestEnsureReservesAboveOtherEntriesAndKeepsThem(t *testing.T) {
	p := testPaths(t, "alice:100000:65536", "alice:100000:65536\nbob:165536:65536\n")
	r, created, err := p.Ensure()
	if err != nil || !created {
		t.Fatalf("Ensure() = %v, %v, %v; want a new range", r, created, err)
	}
	if r.UID != 262144 || r.GID != 262144 || r.Slots != DefaultSlots {
		t.Errorf("Ensure() = %+v, want uids and gids from 262144, %d slots", r, DefaultSlots)
	}
	uid, _ := os.ReadFile(p.SubUID)
	if want := "alice:100000:65536\nairlock:262144:16777216\n"; string(uid) != want {
		t.Errorf("subuid = %q, want %q (a newline added to the unterminated last line)", uid, want)
	}
	again, created, err := p.Ensure()
	if err != nil || created || again != r {
		t.Errorf("second Ensure() = %+v, %v, %v; want the same range, nothing written", again, created, err)
	}
}

func TestReadWithoutAnEntryInBothFilesIsErrNoRange(t *testing.T) {
	p := testPaths(t, "airlock:200000:65536\n", "")
	if _, err := p.Read(); !errors.Is(err, ErrNoRange) {
		t.Errorf("Read() error = %v, want ErrNoRange", err)
	}
	if err := os.Chmod(filepath.Dir(p.SubGID), 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(filepath.Dir(p.SubGID), 0o700)
	if os.Geteuid() != 0 {
		if _, _, err := p.Ensure(); !errors.Is(err, ErrNoRange) {
			t.Errorf("Ensure() with an unwritable lock dir = %v, want ErrNoRange", err)
		}
	}
}

func TestTwoLeasesNeverShareASlot(t *testing.T) {
	p := testPaths(t, "", "")
	r := Range{UID: 200000, GID: 300000, Slots: 2}
	a, err := p.Acquire(r)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Acquire(r)
	if err != nil {
		t.Fatal(err)
	}
	if a.Slot == b.Slot || a.UID == b.UID {
		t.Fatalf("two leases share slot %d (uids %d, %d)", a.Slot, a.UID, b.UID)
	}
	for _, l := range []*Lease{a, b} {
		if l.UID != r.UID+uint32(l.Slot)*SlotSize || l.GID != r.GID+uint32(l.Slot)*SlotSize {
			t.Errorf("lease %+v is not its slot's ids", l)
		}
	}
	if _, err := p.Acquire(r); !errors.Is(err, ErrAllInUse) {
		t.Errorf("third Acquire() error = %v, want ErrAllInUse", err)
	}
	if n := p.InUse(r); n != 2 {
		t.Errorf("InUse = %d, want 2", n)
	}
	a.Release()
	c, err := p.Acquire(r)
	if err != nil || c.Slot != a.Slot {
		t.Errorf("Acquire() after Release = %+v, %v; want slot %d again", c, err, a.Slot)
	}
	b.Release()
	c.Release()
}

// A supervisor killed while it holds a slot gives it back: the lock is the
// kernel's, dropped with the process. flock(1) holds it here like one.
func TestASlotOfAKilledHolderIsFreeAgain(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) not installed")
	}
	p := testPaths(t, "", "")
	r := Range{UID: 200000, GID: 200000, Slots: 1}
	if err := p.lockDir(); err != nil {
		t.Fatal(err)
	}
	// --no-fork: flock(1) execs sleep, so one process holds the lock.
	holder := exec.Command(flock, "--no-fork", filepath.Join(p.LockDir, "slot-0"), "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for p.InUse(r) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took the slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := p.Acquire(r); !errors.Is(err, ErrAllInUse) {
		t.Fatalf("Acquire() while held = %v, want ErrAllInUse", err)
	}
	holder.Process.Kill()
	holder.Wait()
	for {
		l, err := p.Acquire(r)
		if err == nil {
			l.Release()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire() after the holder was killed = %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

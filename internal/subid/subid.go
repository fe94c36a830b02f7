// Package subid reserves the host id range that root's sandboxes run as: an
// "airlock" entry in /etc/subuid and /etc/subgid (so useradd and other
// runtimes leave it alone), cut into slots of SlotSize ids, one slot per
// running sandbox, held by a lock that dies with the process holding it.
package subid

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Owner names airlock's entry in /etc/subuid and /etc/subgid.
const Owner = "airlock"

// SlotSize is the ids one sandbox gets: 0..65535 inside.
const SlotSize = 65536

// DefaultSlots is how many sandboxes may run at once in a range made here.
const DefaultSlots = 256

// minStart keeps a new range above the ids of users and system accounts
// (shadow-utils' SUB_UID_MIN).
const minStart = 100000

// Paths are the files this package reads and writes; tests point them elsewhere.
type Paths struct {
	SubUID, SubGID string
	// LockDir holds one lock file per slot; it must be root's alone.
	LockDir string
}

// DefaultPaths are the system's.
var DefaultPaths = Paths{SubUID: "/etc/subuid", SubGID: "/etc/subgid", LockDir: "/run/airlock-ids"}

// Entry is one line of a subordinate id file: Name may use Count ids from Start.
type Entry struct {
	Name  string
	Start uint32
	Count uint32
}

// End is one past the entry's last id.
func (e Entry) End() uint64 { return uint64(e.Start) + uint64(e.Count) }

// maxFile bounds what is read of a subordinate id file.
const maxFile = 4 << 20

// Parse reads a subuid/subgid file: "name:start:count" per line; blank
// lines and # comments are skipped, malformed lines are errors.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(io.LimitReader(r, maxFile))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 3 || f[0] == "" {
			return nil, fmt.Errorf("line %d: want name:start:count, got %q", n, line)
		}
		start, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %d: want name:start:count, got %q", n, line)
		}
		out = append(out, Entry{Name: f[0], Start: uint32(start), Count: uint32(count)})
	}
	return out, sc.Err()
}

// Find returns the first entry of name with at least one whole slot.
func Find(entries []Entry, name string) (Entry, bool) {
	for _, e := range entries {
		if e.Name == name && e.Count >= SlotSize {
			return e, true
		}
	}
	return Entry{}, false
}

// FreeStart is where a range of count ids can start without overlapping
// any entry of either file: above all of them, slot-aligned, at or above
// minStart. ok is false when no such range fits below 2^32-1.
func FreeStart(count uint32, files ...[]Entry) (uint32, bool) {
	end := uint64(minStart)
	for _, es := range files {
		for _, e := range es {
			end = max(end, e.End())
		}
	}
	start := (end + SlotSize - 1) / SlotSize * SlotSize
	if start+uint64(count) > 1<<32-1 {
		return 0, false
	}
	return uint32(start), true
}

// Range is airlock's reservation: uids from UID and gids from GID, Slots
// sandboxes' worth.
type Range struct {
	UID, GID uint32
	Slots    int
}

// ErrNoRange says /etc/subuid or /etc/subgid has no airlock entry.
var ErrNoRange = errors.New("no id range reserved for airlock in /etc/subuid and /etc/subgid")

// Read returns the reserved range, or ErrNoRange.
func (p Paths) Read() (Range, error) {
	u, err := readFile(p.SubUID)
	if err != nil {
		return Range{}, err
	}
	g, err := readFile(p.SubGID)
	if err != nil {
		return Range{}, err
	}
	ue, ok1 := Find(u, Owner)
	ge, ok2 := Find(g, Owner)
	if !ok1 || !ok2 {
		return Range{}, ErrNoRange
	}
	return Range{UID: ue.Start, GID: ge.Start, Slots: int(min(ue.Count, ge.Count) / SlotSize)}, nil
}

func readFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return es, nil
}

// Ensure returns the reserved range, first adding an airlock entry of
// DefaultSlots slots to each file that lacks one (root only). created says
// whether it wrote anything. Concurrent callers are serialised by a lock.
func (p Paths) Ensure() (r Range, created bool, err error) {
	if r, err := p.Read(); err == nil || !errors.Is(err, ErrNoRange) {
		return r, false, err
	}
	unlock, err := p.lock("reserve")
	if err != nil {
		return Range{}, false, fmt.Errorf("%w: %w", ErrNoRange, err)
	}
	defer unlock()
	u, err := readFile(p.SubUID)
	if err != nil {
		return Range{}, false, err
	}
	g, err := readFile(p.SubGID)
	if err != nil {
		return Range{}, false, err
	}
	count := uint32(DefaultSlots * SlotSize)
	_, hasU := Find(u, Owner)
	_, hasG := Find(g, Owner)
	// One start for both files when both lack an entry: the same numbers
	// for uids and gids are easier to read.
	start, ok := FreeStart(count, u, g)
	if !ok {
		return Range{}, false, fmt.Errorf("%w: no free range of %d ids left below 2^32", ErrNoRange, count)
	}
	for _, f := range []struct {
		path string
		has  bool
	}{{p.SubUID, hasU}, {p.SubGID, hasG}} {
		if f.has {
			continue
		}
		if err := appendEntry(f.path, Entry{Owner, start, count}); err != nil {
			return Range{}, false, fmt.Errorf("%w: reserve one in %s: %w", ErrNoRange, f.path, err)
		}
	}
	r, err = p.Read()
	return r, err == nil, err
}

// appendEntry adds one line; appending (not rewriting) keeps the file's
// inode, owner and mode, and a reader sees either the old file or the new.
func appendEntry(path string, e Entry) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	line := fmt.Sprintf("%s:%d:%d\n", e.Name, e.Start, e.Count)
	if st.Size() > 0 {
		// A file whose last line lacks its newline would glue ours onto it.
		b := make([]byte, 1)
		if r, err := os.Open(path); err == nil {
			if _, err := r.ReadAt(b, st.Size()-1); err == nil && b[0] != '\n' {
				line = "\n" + line
			}
			r.Close()
		}
	}
	if _, err := f.WriteString(line); err != nil {
		return err
	}
	return f.Sync()
}

func (p Paths) lockDir() error {
	if err := os.MkdirAll(p.LockDir, 0o700); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(p.LockDir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s must be a directory of uid %d that nobody else may write", p.LockDir, os.Geteuid())
	}
	return nil
}

// lock takes an exclusive lock on name in the lock dir, waiting for it.
func (p Paths) lock(name string) (func(), error) {
	if err := p.lockDir(); err != nil {
		return nil, err
	}
	fd, err := unix.Open(filepath.Join(p.LockDir, name), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return func() { unix.Close(fd) }, nil
}

// Lease is one slot of the range, held until Release: its ids are this
// sandbox's alone. The lock is an flock, so a supervisor that dies (even
// killed) releases it with its last descriptor, and its sandbox, which dies
// with it, leaves nothing that runs as these ids.
type Lease struct {
	UID, GID uint32 // the slot's first ids: uid/gid 0 inside
	Slot     int
	fd       int
}

// ErrAllInUse says every slot is held by a running sandbox.
var ErrAllInUse = errors.New("every id slot in airlock's range is in use by a running sandbox")

// Acquire takes a free slot of r. Slots are tried from a random one, so
// concurrent starts rarely contend.
func (p Paths) Acquire(r Range) (*Lease, error) {
	if r.Slots <= 0 {
		return nil, ErrNoRange
	}
	if err := p.lockDir(); err != nil {
		return nil, err
	}
	first := rand.IntN(r.Slots)
	for i := range r.Slots {
		slot := (first + i) % r.Slots
		fd, err := unix.Open(filepath.Join(p.LockDir, "slot-"+strconv.Itoa(slot)), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, err
		}
		off := uint32(slot) * SlotSize
		return &Lease{UID: r.UID + off, GID: r.GID + off, Slot: slot, fd: fd}, nil
	}
	return nil, fmt.Errorf("%w (%d slots)", ErrAllInUse, r.Slots)
}

// Release gives the slot back; call it once nothing runs as its ids.
func (l *Lease) Release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// InUse counts the slots held now (for doctor).
func (p Paths) InUse(r Range) int {
	n := 0
	for slot := range r.Slots {
		fd, err := unix.Open(filepath.Join(p.LockDir, "slot-"+strconv.Itoa(slot)), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		if unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB) != nil {
			n++
		}
		unix.Close(fd)
	}
	return n
}

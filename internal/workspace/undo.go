package workspace

// Undo: a bind run changes the host's workspace in place, so what it
// overwrote and deleted is kept, by content, in a store under airlock's
// state dir: blobs/AB/SHA256 (the hashes the start manifest and the hash
// cache already know), and runs/ID.json listing the run's changes.
//
// The old bytes must be read before the sandbox can change them: a bind
// session with an undo store takes its start manifest before anything
// runs inside, then copies each file the store lacks (a file still as the
// manifest saw it: same inode, size, mtime and ctime, and the copy's hash
// checked), waiting for that up to undoWait and going on beside the
// sandbox after. Later runs copy only what is new. A file the sandbox
// changed before its copy was made is listed as lost, and undo refuses it.
// The store is bounded (MaxBytes): the least recently used blobs go
// first, and a run whose changes alone exceed the bound is warned about.
//
// Undo applies the run's changes backwards (Apply, resolving every path
// beneath the workspace without following links, staging and hashing
// each file before an atomic rename), and only where the workspace still
// holds what the run left: a path changed again since is refused and
// listed.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultUndoBytes is the undo store's bound unless configured.
const DefaultUndoBytes = 1 << 30

// undoWait is how long a bind run's start waits for the old content to be
// copied before it goes on beside the sandbox.
const undoWait = 3 * time.Second

// maxUndoRecord bounds a run's record (its changes listed).
const maxUndoRecord = 64 << 20

// maxUndoRuns bounds the records kept: the oldest go first.
const maxUndoRuns = 200

// UndoRecord is what airlock undo needs of one run.
type UndoRecord struct {
	ID      string    `json:"id"`
	Root    string    `json:"root"`
	Ended   time.Time `json:"ended"`
	Changes []Change  `json:"changes"`
	// Lost are paths whose old content was not kept (changed before it
	// could be copied, or over the store's bound).
	Lost   []string   `json:"lost,omitempty"`
	Undone *time.Time `json:"undone,omitempty"`
}

// UndoSummary is what ls and the undo list show of a run: kept beside its
// record (runs/ID.sum), so listing reads no change list.
type UndoSummary struct {
	ID      string     `json:"id"`
	Root    string     `json:"root"`
	Ended   time.Time  `json:"ended"`
	Changes int        `json:"changes"`
	Lost    int        `json:"lost,omitempty"`
	Evicted bool       `json:"evicted,omitempty"` // old content the store dropped since (its bound)
	Undone  *time.Time `json:"undone,omitempty"`
}

func (r *UndoRecord) summary() UndoSummary {
	return UndoSummary{ID: r.ID, Root: r.Root, Ended: r.Ended, Changes: len(r.Changes), Lost: len(r.Lost), Undone: r.Undone}
}

// UndoStore is the store's directory and its bound.
type UndoStore struct {
	Dir      string
	MaxBytes int64
}

func (u UndoStore) blob(sum string) string {
	return filepath.Join(u.Dir, "blobs", sum[:2], sum)
}

func (u UndoStore) runFile(id string) string {
	return filepath.Join(u.Dir, "runs", id+".json")
}

func (u UndoStore) sumFile(id string) string {
	return filepath.Join(u.Dir, "runs", id+".sum")
}

// save writes rec and its summary (the summary last: a listed run has
// its record).
func (u UndoStore) save(rec *UndoRecord, evicted bool) error {
	if err := writeJSONFile(u.runFile(rec.ID), rec); err != nil {
		return err
	}
	sum := rec.summary()
	sum.Evicted = evicted
	return writeJSONFile(u.sumFile(rec.ID), sum)
}

func validSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

func (u UndoStore) has(sum string) bool {
	st, err := os.Lstat(u.blob(sum))
	return err == nil && st.Mode().IsRegular()
}

// keeper copies the start manifest's files into the store beside the
// sandbox (see the package's Undo note).
type keeper struct {
	store UndoStore
	root  string
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	kept map[string]bool // content kept, by hash
	over bool            // the bound stopped the copy
}

func newKeeper(store UndoStore, root string) *keeper {
	return &keeper{store: store, root: root, stop: make(chan struct{}), done: make(chan struct{}), kept: map[string]bool{}}
}

// run copies what base lists that the store lacks; it ends early on stop.
func (k *keeper) run(base Manifest) {
	defer close(k.done)
	if err := os.MkdirAll(filepath.Join(k.store.Dir, "blobs"), 0o700); err != nil {
		return
	}
	rfd, err := openDirNoSymlinks(k.root)
	if err != nil {
		return
	}
	defer unix.Close(rfd)
	total := storeSize(k.store.Dir)
	paths := make([]string, 0, len(base))
	for p, e := range base {
		if e.Type == TypeFile && validSum(e.SHA256) {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	now := time.Now()
	for _, p := range paths {
		select {
		case <-k.stop:
			return
		default:
		}
		e := base[p]
		if k.store.has(e.SHA256) {
			os.Chtimes(k.store.blob(e.SHA256), now, now) // used: evicted last
			k.mark(e.SHA256)
			continue
		}
		if total+e.Size > k.store.MaxBytes {
			k.mu.Lock()
			k.over = true
			k.mu.Unlock()
			continue
		}
		if k.copy(rfd, e) {
			total += e.Size
			k.mark(e.SHA256)
		}
	}
}

func (k *keeper) mark(sum string) {
	k.mu.Lock()
	k.kept[sum] = true
	k.mu.Unlock()
}

// copy keeps e's bytes if the file is still as the manifest saw it.
func (k *keeper) copy(rfd int, e Entry) bool {
	fd, err := openBeneath(rfd, e.Path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), e.Path)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != e.Ino || st.Size != e.Size ||
		st.Mtim.Nano() != e.Mtime || st.Ctim.Nano() != e.Ctime {
		return false
	}
	dst := k.store.blob(e.SHA256)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return false
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-")
	if err != nil {
		return false
	}
	defer os.Remove(tmp.Name())
	sum, n, err := hashReader(io.TeeReader(io.LimitReader(f, e.Size+1), tmp))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	// The ctime again: a write during the copy shows there, even one that
	// keeps the size and the hash's luck.
	if err != nil || n != e.Size || sum != e.SHA256 || unix.Fstat(fd, &st) != nil || st.Ctim.Nano() != e.Ctime {
		return false
	}
	os.Chmod(tmp.Name(), 0o400)
	return os.Rename(tmp.Name(), dst) == nil
}

// finish stops the copy and waits for it.
func (k *keeper) finish() {
	k.once.Do(func() { close(k.stop) })
	<-k.done
}

// storeSize is the bytes the store's blobs hold.
func storeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(filepath.Join(dir, "blobs"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// needsOld reports whether undoing c needs its old bytes from the store.
func needsOld(c Change) bool {
	return c.Before != nil && c.Before.Type == TypeFile && c.Kind != ModeOnly && c.Kind != Reverted
}

// recordUndo writes the run's record and trims the store; it returns the
// warnings for the review.
func (s *Session) recordUndo(cs []Change) []string {
	k := s.keeper
	if k == nil {
		return nil
	}
	k.finish()
	start := s.m.Started.UnixNano()
	rec := UndoRecord{ID: s.m.UndoID, Root: s.m.Root, Ended: time.Now().UTC()}
	var need int64
	for _, c := range cs {
		if c.Kind == Reverted || c.Refused != "" && c.After != nil {
			continue
		}
		c.Risks = nil
		rec.Changes = append(rec.Changes, c)
		if !needsOld(c) {
			continue
		}
		need += c.Before.Size
		if c.Before.Ctime >= start || !validSum(c.Before.SHA256) || !k.store.has(c.Before.SHA256) {
			rec.Lost = append(rec.Lost, c.Path)
		}
	}
	if len(rec.Changes) == 0 {
		return nil
	}
	var warn []string
	if need > k.store.MaxBytes {
		warn = append(warn, fmt.Sprintf("undo: the run overwrote or deleted %s, more than the undo store keeps (%s): %d file(s) cannot be undone (raise workspace.undo_max_bytes)",
			mib(need), mib(k.store.MaxBytes), len(rec.Lost)))
	} else if len(rec.Lost) > 0 {
		warn = append(warn, fmt.Sprintf("undo: the old content of %d file(s) was not kept (changed before airlock could copy it): %s", len(rec.Lost), shorten(strings.Join(rec.Lost, ", "), 200)))
	}
	if err := os.MkdirAll(filepath.Join(k.store.Dir, "runs"), 0o700); err == nil {
		if err := k.store.save(&rec, false); err != nil {
			warn = append(warn, "undo: record not written: "+err.Error())
		}
	}
	keep := map[string]bool{}
	for _, c := range rec.Changes {
		if needsOld(c) {
			keep[c.Before.SHA256] = true
		}
	}
	k.store.trim(keep)
	k.store.trimRuns()
	return warn
}

// trimRuns removes the oldest records beyond maxUndoRuns.
func (u UndoStore) trimRuns() {
	ents, err := os.ReadDir(filepath.Join(u.Dir, "runs"))
	if err != nil || len(ents) <= 2*maxUndoRuns {
		return
	}
	type run struct {
		name string
		t    time.Time
	}
	var runs []run
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if fi, err := e.Info(); ok && err == nil && fi.Mode().IsRegular() {
			runs = append(runs, run{id, fi.ModTime()})
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].t.Before(runs[j].t) })
	for _, r := range runs[:max(0, len(runs)-maxUndoRuns)] {
		os.Remove(u.sumFile(r.name))
		os.Remove(u.runFile(r.name))
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// trim removes the least recently used blobs until the store fits its
// bound, keeping those in keep (the run just recorded) to the last.
func (u UndoStore) trim(keep map[string]bool) {
	type blob struct {
		path string
		size int64
		used time.Time
		keep bool
	}
	var all []blob
	var total int64
	filepath.WalkDir(filepath.Join(u.Dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				all = append(all, blob{p, fi.Size(), fi.ModTime(), keep[filepath.Base(p)]})
				total += fi.Size()
			}
		}
		return nil
	})
	if total <= u.MaxBytes {
		return
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].keep != all[j].keep {
			return !all[i].keep
		}
		return all[i].used.Before(all[j].used)
	})
	gone := map[string]bool{}
	for _, b := range all {
		if total <= u.MaxBytes {
			break
		}
		if os.Remove(b.path) == nil {
			total -= b.size
			gone[filepath.Base(b.path)] = true
		}
	}
	u.markEvicted(gone)
}

// markEvicted notes in their summaries the runs whose old content went
// (read in full only when the bound removed something).
func (u UndoStore) markEvicted(gone map[string]bool) {
	if len(gone) == 0 {
		return
	}
	sums, _ := u.Runs()
	for _, sm := range sums {
		if sm.Evicted || sm.Undone != nil {
			continue
		}
		rec, err := u.LoadUndo(sm.ID)
		if err != nil {
			continue
		}
		for _, c := range rec.Changes {
			if needsOld(c) && gone[c.Before.SHA256] {
				u.save(rec, true)
				break
			}
		}
	}
}

// LoadUndo reads run id's record.
func (u UndoStore) LoadUndo(id string) (*UndoRecord, error) {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil, fs.ErrNotExist
	}
	f, err := os.Open(u.runFile(id))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rec UndoRecord
	if err := json.NewDecoder(io.LimitReader(f, maxUndoRecord)).Decode(&rec); err != nil {
		return nil, fmt.Errorf("undo: read the record of %s: %w", id, err)
	}
	return &rec, nil
}

// Runs lists the recorded runs' summaries, newest first.
func (u UndoStore) Runs() ([]UndoSummary, error) {
	ents, err := os.ReadDir(filepath.Join(u.Dir, "runs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []UndoSummary
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".sum") {
			continue
		}
		b, err := readBounded(filepath.Join(u.Dir, "runs"), e.Name(), 64<<10)
		var sm UndoSummary
		if err == nil && json.Unmarshal(b, &sm) == nil {
			out = append(out, sm)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ended.After(out[j].Ended) })
	return out, nil
}

// Undoable says whether a run can be undone: "yes", "partly" (some old
// content was not kept, or is gone), "undone", or "no".
func (sm UndoSummary) Undoable() string {
	switch {
	case sm.Undone != nil:
		return "undone"
	case sm.Lost > 0 && sm.Lost >= sm.Changes:
		return "no"
	case sm.Lost > 0 || sm.Evicted:
		return "partly"
	}
	return "yes"
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// UndoResult is what Undo did: paths restored and paths refused, with why.
type UndoResult struct {
	Restored []string  `json:"restored"`
	Refused  []Skipped `json:"refused,omitempty"`
}

// Undo puts the workspace back as it was before run rec, path by path,
// where it still holds what the run left.
func (u UndoStore) Undo(rec *UndoRecord) (UndoResult, error) {
	var res UndoResult
	tree, err := os.MkdirTemp(u.Dir, "undo-")
	if err != nil {
		return res, fmt.Errorf("undo: %w", err)
	}
	defer removeTree(tree)
	var back []Change
	for _, c := range rec.Changes {
		if contains(rec.Lost, c.Path) {
			res.Refused = append(res.Refused, Skipped{c.Path, "its old content was not kept"})
			continue
		}
		if !validRel(c.Path) {
			res.Refused = append(res.Refused, Skipped{c.Path, "not a plain relative path"})
			continue
		}
		r := Change{Path: c.Path, Kind: c.Kind, Before: c.After, After: c.Before}
		switch c.Kind {
		case Created:
			r.Kind = Deleted
		case Deleted:
			r.Kind = Created
		}
		if needsOld(c) {
			// The old bytes at the path Apply reads them from: a link
			// to the blob (the store is on the same filesystem).
			dst := filepath.Join(tree, filepath.FromSlash(c.Path))
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return res, fmt.Errorf("undo: %w", err)
			}
			if !validSum(c.Before.SHA256) || os.Link(u.blob(c.Before.SHA256), dst) != nil && copyFile(u.blob(c.Before.SHA256), dst) != nil {
				res.Refused = append(res.Refused, Skipped{c.Path, "its old content is no longer in the undo store"})
				continue
			}
		}
		back = append(back, r)
	}
	// What the run left is what each path must still hold.
	ar, aerr := Apply(rec.Root, tree, back, func(c Change) *Entry { return c.Before })
	for _, c := range ar.Applied {
		res.Restored = append(res.Restored, c.Path)
	}
	for _, s := range ar.Skipped {
		if strings.HasPrefix(s.Why, "changed on the host since") {
			s.Why = "changed since the run: look at it, then restore it by hand"
		} else if strings.HasPrefix(s.Why, "deleted on the host since") {
			s.Why = "deleted since the run"
		}
		res.Refused = append(res.Refused, s)
	}
	sort.Slice(res.Refused, func(i, j int) bool { return res.Refused[i].Path < res.Refused[j].Path })
	if len(res.Refused) == 0 && aerr == nil {
		now := time.Now().UTC()
		rec.Undone = &now
		u.save(rec, false)
	}
	return res, aerr
}

func copyFile(from, to string) error {
	b, err := readBounded(filepath.Dir(from), filepath.Base(from), 1<<40)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o400)
}

package workspace

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Cache remembers file hashes by identity: device, inode, size, mtime and
// ctime. Nothing but the kernel sets ctime, so a file that matches all five
// still holds the bytes that were hashed. A scan uses the entries it finds
// and keeps only those, so the cache never outgrows the tree.
type Cache struct {
	old map[cacheKey]cacheVal // read-only once made: looked up without the lock

	mu      sync.Mutex
	seen    map[cacheKey]cacheVal // what Save keeps; nil in a cache never saved
	learned bool                  // a hash was added since Load
}

type cacheKey struct{ Dev, Ino uint64 }

type cacheVal struct {
	Size, Mtime, Ctime int64
	Sum                string
}

// settled is how long a file's ctime must lie before the moment it was
// hashed for the hash to be reused: longer than the coarsest timestamp tick
// (10 ms), so any later write gives the file a different ctime.
const settled = 50 * time.Millisecond

func trusted(e *Entry) bool { return e.Stamp-e.Ctime >= int64(settled) }

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{old: map[cacheKey]cacheVal{}, seen: map[cacheKey]cacheVal{}}
}

// CacheFrom seeds a cache with the hashes in m (a copy made earlier, whose
// files may since have been changed by the sandbox), for scans to read: it
// learns nothing and is never saved.
func CacheFrom(m Manifest) *Cache {
	c := &Cache{old: make(map[cacheKey]cacheVal, len(m))}
	for _, e := range m {
		if e.Type == TypeFile && e.SHA256 != "" && trusted(&e) {
			c.old[cacheKey{e.Dev, e.Ino}] = cacheVal{e.Size, e.Mtime, e.Ctime, e.SHA256}
		}
	}
	return c
}

func (c *Cache) lookup(e *Entry) (string, bool) {
	if c == nil {
		return "", false
	}
	k := cacheKey{e.Dev, e.Ino}
	v, ok := c.old[k]
	if !ok || v.Size != e.Size || v.Mtime != e.Mtime || v.Ctime != e.Ctime {
		return "", false
	}
	if c.seen != nil {
		c.mu.Lock()
		c.seen[k] = v
		c.mu.Unlock()
	}
	return v.Sum, true
}

func (c *Cache) store(e *Entry) {
	if c == nil || c.seen == nil || !trusted(e) {
		return
	}
	c.mu.Lock()
	c.seen[cacheKey{e.Dev, e.Ino}] = cacheVal{e.Size, e.Mtime, e.Ctime, e.SHA256}
	c.learned = true
	c.mu.Unlock()
}

// Len is the number of hashes the cache would save.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// The cache file: cacheMagic, then one fixed-size record per file (device,
// inode, size, mtime, ctime, little-endian; the raw SHA-256). Reading it
// is a copy and a map insert per file: an agent harness's short runs read
// it on every start. An unknown magic or a torn file is ignored, not an
// error.
const cacheMagic = "airlock-hash-cache-2\n"

const (
	cacheRecordSize = 5*8 + sha256.Size
	hexSum          = 2 * sha256.Size
)

// LoadCache reads a cache file; a missing or unreadable one gives an empty
// cache (it is only an optimisation).
func LoadCache(p string) *Cache {
	c := NewCache()
	f, err := os.Open(p)
	if err != nil {
		return c
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() > int64(len(cacheMagic)+DefaultMaxEntries*cacheRecordSize) {
		return c
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil || !bytes.HasPrefix(b, []byte(cacheMagic)) || (len(b)-len(cacheMagic))%cacheRecordSize != 0 {
		return c
	}
	b = b[len(cacheMagic):]
	n := len(b) / cacheRecordSize
	// Every hash as hex in one string, which the entries slice: no
	// allocation per file.
	sums := make([]byte, 0, n*hexSum)
	for r := b; len(r) > 0; r = r[cacheRecordSize:] {
		sums = hex.AppendEncode(sums, r[5*8:cacheRecordSize])
	}
	all := string(sums)
	c.old = make(map[cacheKey]cacheVal, n)
	le := binary.LittleEndian
	for i := range n {
		r := b[i*cacheRecordSize:]
		k := cacheKey{le.Uint64(r), le.Uint64(r[8:])}
		c.old[k] = cacheVal{int64(le.Uint64(r[16:])), int64(le.Uint64(r[24:])), int64(le.Uint64(r[32:])), all[i*hexSum : (i+1)*hexSum]}
	}
	return c
}

// Save writes the hashes used or learnt by scans since Load, atomically.
func (c *Cache) Save(p string) error {
	if c.seen == nil {
		return errors.New("hash cache: one made by CacheFrom is not saved")
	}
	c.mu.Lock()
	if !c.learned && len(c.seen) == len(c.old) {
		c.mu.Unlock()
		return nil // every hash came from the file, and none went stale
	}
	b := make([]byte, 0, len(cacheMagic)+len(c.seen)*cacheRecordSize)
	b = append(b, cacheMagic...)
	le := binary.LittleEndian
	for k, v := range c.seen {
		sum, err := hex.DecodeString(v.Sum)
		if err != nil || len(sum) != sha256.Size {
			continue
		}
		b = le.AppendUint64(b, k.Dev)
		b = le.AppendUint64(b, k.Ino)
		b = le.AppendUint64(b, uint64(v.Size))
		b = le.AppendUint64(b, uint64(v.Mtime))
		b = le.AppendUint64(b, uint64(v.Ctime))
		b = append(b, sum...)
	}
	c.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("hash cache: %w", err)
	}
	return writeAtomic(p, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// writeAtomic writes a file through a temp file and rename.
func writeAtomic(p string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	w := bufio.NewWriterSize(f, 1<<20)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// scanWait bounds how long a scan waits for another process's scan of the
// same tree before it goes ahead on its own: a bind sandbox's manifest is
// taken while it runs, and the later it comes the more a deletion by the
// sandbox can slip past the review.
const scanWait = 10 * time.Second

// lockScan takes the exclusive lock at p (created 0600 in a 0700 dir),
// waiting at most wait, or until stop is closed, and returns its release. A
// lock that cannot be made or taken in time is skipped: it only saves work.
func lockScan(p string, wait time.Duration, stop <-chan struct{}) (unlock func()) {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return func() {}
	}
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return func() {}
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR || time.Now().After(deadline) {
			unix.Close(fd)
			return func() {}
		}
		select {
		case <-stop:
			unix.Close(fd)
			return func() {}
		case <-time.After(10 * time.Millisecond):
		}
	}
}

package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// maxCount bounds how much of a removed file is read to count its records.
const maxCount = 64 << 20

// openFile opens path for appending (created 0600) and reports whether it ends in a
// torn line: a previous writer killed mid-write leaves a partial line, and appending
// straight after it would corrupt our first record too.
func openFile(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, err
	}
	needNL := false
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		if r, err := os.Open(path); err == nil {
			var last [1]byte
			if _, err := r.ReadAt(last[:], fi.Size()-1); err == nil && last[0] != '\n' {
				needNL = true
			}
			r.Close()
		}
	}
	return f, needNL, nil
}

// writeLine appends line to path: to the file path names now (another process may
// have rotated ours away), after rotating it if line would take it past MaxBytes.
// l.mu is held.
func (l *Log) writeLine(line []byte) error {
	l.follow()
	if l.opt.MaxBytes > 0 {
		if fi, err := l.f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 &&
			fi.Size()+int64(len(line)) > l.opt.MaxBytes {
			l.rotate(fi)
		}
	}
	if l.needNL {
		line = append([]byte{'\n'}, line...)
	}
	_, err := l.f.Write(line)
	if err == nil {
		l.needNL = false
	}
	return err
}

// follow reopens path if it no longer names the file we hold. When path cannot be
// stat'ed or reopened (its directory is gone), writing goes on to the file we hold.
func (l *Log) follow() {
	pi, err := os.Stat(l.path)
	if err == nil {
		if fi, err := l.f.Stat(); err != nil || os.SameFile(pi, fi) {
			return
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return
	}
	l.reopen()
}

func (l *Log) reopen() {
	f, needNL, err := openFile(l.path)
	if err != nil {
		return
	}
	l.f.Close()
	l.f, l.needNL = f, needNL
}

// rotate renames path to path.1 (shifting older files up, removing path.Keep) and
// starts a new path whose first record says what was removed. fi is the full file's
// stat. Rotations by several processes are serialized by flock on the full file; a
// process that gets the lock after another rotated finds path renamed and reopens.
// Failing to rotate is not fatal: the record is appended to the full file.
func (l *Log) rotate(fi os.FileInfo) {
	unlock := lockFile(l.f)
	if pi, err := os.Stat(l.path); err != nil || !os.SameFile(pi, fi) {
		unlock()
		l.reopen()
		return
	}
	cur, err := l.f.Stat()
	if err != nil {
		unlock()
		return
	}
	base := filepath.Base(l.path)
	name := func(i int) string { return l.path + "." + strconv.Itoa(i) }

	var gone string
	var goneRecords int
	if l.opt.Keep == 0 {
		goneRecords, _ = countLines(l.path)
		gone = fmt.Sprintf("; its %d records (%d bytes) were removed (keep 0)", goneRecords, cur.Size())
		err = os.Remove(l.path)
	} else {
		if old, err := os.Stat(name(l.opt.Keep)); err == nil {
			goneRecords, _ = countLines(name(l.opt.Keep))
			if os.Remove(name(l.opt.Keep)) == nil {
				gone = fmt.Sprintf("; %s.%d was removed (%d records, %d bytes)", base, l.opt.Keep, goneRecords, old.Size())
			}
		}
		for i := l.opt.Keep - 1; i >= 1; i-- {
			os.Rename(name(i), name(i+1)) // a missing one is a gap, not an error
		}
		err = os.Rename(l.path, name(1))
	}
	if err != nil {
		unlock()
		return
	}
	f, _, err := openFile(l.path)
	unlock()
	if err != nil {
		return // keep appending to the renamed file rather than lose records
	}
	l.f.Close()
	l.f, l.needNL = f, false

	to := base + ".1"
	if l.opt.Keep == 0 {
		to = ""
	}
	r := Record{Time: time.Now().UTC(), Sandbox: l.sandbox, Kind: KindAudit, Decision: DecisionRotated,
		Subject: to, Count: goneRecords,
		Reason: fmt.Sprintf("%s reached %d bytes (limit %d)%s", base, cur.Size(), l.opt.MaxBytes, gone)}
	if to != "" {
		r.Reason = fmt.Sprintf("%s reached %d bytes (limit %d) and was renamed %s%s", base, cur.Size(), l.opt.MaxBytes, to, gone)
	}
	if r, line, err := encode(r); err == nil {
		l.f.Write(line)
		l.publish(r)
	}
}

// countLines counts the newlines in the first maxCount bytes of path.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	n := 0
	r := io.LimitReader(f, maxCount)
	for {
		m, err := r.Read(buf)
		n += bytes.Count(buf[:m], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"time"
)

// maxReadLine is far above MaxLine so records from older or foreign writers still
// read, yet bounded so a corrupt file cannot make a reader buffer without limit.
const maxReadLine = 1 << 20

// pollInterval is how often Follow looks for appended lines and asks stop.
const pollInterval = 200 * time.Millisecond

// Read streams records from r; a corrupt line is reported via the onErr callback (with
// line number) and skipped, never aborts; lines over 1 MiB are skipped as corrupt. It
// returns fn's first error or r's, never one for a bad line.
func Read(r io.Reader, fn func(Record) error, onErr func(line int, err error)) error {
	lr := newLineReader(r)
	for {
		line, n, bad, err := lr.next()
		if err == io.EOF {
			// A last line without a newline is still a line (often a torn write).
			if line, n, bad = lr.rest(); n > 0 {
				return deliver(line, n, bad, fn, onErr)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := deliver(line, n, bad, fn, onErr); err != nil {
			return err
		}
	}
}

// Follow reads path from the start and keeps reading appended lines until ctx is done
// or stop() returns true (polled every 200ms) — for `airlock audit -f`. A path that does
// not exist yet is waited for, as the sandbox may not have written its first record.
// Corrupt lines are skipped. It returns nil when told to stop: that is how following
// ends; errors come only from fn or I/O. After stop reports true, lines already
// appended are still delivered, so a sandbox's last records are not lost.
//
// Follow survives rotation (see Options): when path names a new file, it reads the
// rest of the old one, then any file rotated in between (path.k-1 … path.1, if the old
// one is now path.k), then the new one from its start. With one writing process this
// loses and repeats nothing, unless files are rotated past Keep faster than they are read.
func Follow(ctx context.Context, path string, fn func(Record) error, stop func() bool) error {
	var f *os.File
	for {
		var err error
		if f, err = os.Open(path); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("audit: %w", err)
		}
		if stop != nil && stop() || !sleep(ctx) {
			return nil
		}
	}
	defer func() { f.Close() }()

	lr := newLineReader(f)
	stopping := false
	for {
		if ctx.Err() != nil {
			return nil
		}
		line, n, bad, err := lr.next()
		switch {
		case err == nil:
			if err := deliver(line, n, bad, fn, nil); err != nil {
				return err
			}
			continue
		case err != io.EOF:
			return fmt.Errorf("audit: read %s: %w", path, err)
		}
		nf, err := rotated(path, f, lr, fn)
		if err != nil {
			return err
		}
		if nf != nil {
			f.Close()
			f, lr = nf, newLineReader(nf)
			continue
		}
		// At EOF a partial last line is kept: it is a record being written.
		if stopping {
			return nil
		}
		if stop != nil && stop() {
			stopping = true // one more pass for lines appended before stop turned true
			continue
		}
		if !sleep(ctx) {
			return nil
		}
	}
}

// Files lists a log's files in the order they were written: the rotated
// ones oldest first (path.N … path.1), then path itself.
func Files(path string) []string {
	files := []string{path}
	for k := 1; k <= maxRotated; k++ {
		p := path + "." + strconv.Itoa(k)
		if _, err := os.Stat(p); err != nil {
			break
		}
		files = append([]string{p}, files...)
	}
	return files
}

// maxRotated bounds how far Follow looks (path.1 … path.maxRotated) for the file it was
// reading after a rotation.
const maxRotated = 100

// rotated is called at EOF of f: if path now names another file, it delivers the rest
// of f and of every file rotated since, and returns path opened anew; otherwise nil.
func rotated(path string, f *os.File, lr *lineReader, fn func(Record) error) (*os.File, error) {
	pi, err := os.Stat(path)
	if err != nil {
		return nil, nil // between a rename and the new file's creation: look again later
	}
	fi, err := f.Stat()
	if err != nil || os.SameFile(pi, fi) {
		return nil, nil
	}
	// Lines written before the rename are all in f now.
	if err := drain(lr, fn); err != nil {
		return nil, err
	}
	// Walk forward from f by identity, not by name: a file's index grows
	// with every rotation, which may happen while we read. next opens the
	// file just newer than cur and returns it only if cur did not move
	// meanwhile; else it looks again.
	cur := fi
	for tries := 0; tries < 10*maxRotated; tries++ {
		k := indexOf(path, cur)
		name := path
		if k > 1 {
			name = path + "." + strconv.Itoa(k-1)
		}
		g, err := os.Open(name)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// Renamed under us, or path between its rename and the new
				// file's creation: look again shortly.
				time.Sleep(time.Millisecond)
				continue
			}
			return nil, fmt.Errorf("audit: reopen %s after rotation: %w", name, err)
		}
		if k > 0 && indexOf(path, cur) != k { // a rotation slipped in: g may not be next
			g.Close()
			continue
		}
		if name == path {
			return g, nil // the live file: followed from its start
		}
		gi, err := g.Stat()
		if err == nil {
			err = drain(newLineReader(g), fn)
		}
		g.Close()
		if err != nil {
			return nil, err
		}
		cur = gi
	}
	return os.Open(path)
}

// indexOf is k when path.k is the file fi (0 when it is none of them: gone
// past Keep, or path itself). A rotation renames path.k to path.k+1 from
// the oldest down, so while one runs there is a hole below the files not
// yet renamed: one missing name is passed over, two in a row end the list.
func indexOf(path string, fi os.FileInfo) int {
	missing := 0
	for k := 1; k <= maxRotated; k++ {
		ki, err := os.Stat(path + "." + strconv.Itoa(k))
		if err != nil {
			if missing++; missing == 2 {
				return 0
			}
			continue
		}
		missing = 0
		if os.SameFile(ki, fi) {
			return k
		}
	}
	return 0
}

// drain delivers lr's remaining lines, a torn last one included (skipped as corrupt).
func drain(lr *lineReader, fn func(Record) error) error {
	for {
		line, n, bad, err := lr.next()
		if err == io.EOF {
			if line, n, bad = lr.rest(); n > 0 {
				return deliver(line, n, bad, fn, nil)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if err := deliver(line, n, bad, fn, nil); err != nil {
			return err
		}
	}
}

// sleep waits one poll interval and reports whether ctx is still live.
func sleep(ctx context.Context) bool {
	t := time.NewTimer(pollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// deliver decodes one line and hands it to fn, or reports it to onErr.
func deliver(line []byte, n int, bad bool, fn func(Record) error, onErr func(int, error)) error {
	line = bytes.TrimSpace(line)
	if !bad && len(line) == 0 {
		return nil // blank lines carry nothing; reporting them would only be noise
	}
	var rec Record
	var err error
	if bad {
		err = fmt.Errorf("line longer than %d bytes", maxReadLine)
	} else {
		rec, err = decode(line)
	}
	if err != nil {
		if onErr != nil {
			onErr(n, err)
		}
		return nil
	}
	return fn(rec)
}

func decode(line []byte) (Record, error) {
	var r Record
	// Unmarshal accepts `null` into a struct as a no-op; that is not a record.
	if line[0] != '{' {
		return r, errors.New("not a JSON object")
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return Record{}, err
	}
	if r.Kind == "" {
		return Record{}, errors.New("record has no kind")
	}
	return r, nil
}

// lineReader splits input into numbered lines of bounded size. Unlike bufio.Scanner
// it survives an over-long line (skipping it) and, at EOF, keeps a partial line so
// Follow can complete it when the writer's next bytes arrive.
type lineReader struct {
	br      *bufio.Reader
	buf     []byte
	size    int  // bytes of the current line so far, newline included
	tooLong bool // current line exceeded maxReadLine; its bytes are being discarded
	n       int  // number of the last line returned
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next complete line (without its newline, valid until the next
// call), its 1-based number, and whether it was too long to keep.
func (lr *lineReader) next() ([]byte, int, bool, error) {
	for {
		chunk, err := lr.br.ReadSlice('\n')
		lr.size += len(chunk)
		if !lr.tooLong {
			// maxReadLine+1 leaves room for the newline itself.
			if lr.size > maxReadLine+1 {
				lr.tooLong, lr.buf = true, lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		switch err {
		case nil:
			line, bad := bytes.TrimSuffix(lr.buf, []byte{'\n'}), lr.tooLong
			lr.buf, lr.size, lr.tooLong = lr.buf[:0], 0, false
			lr.n++
			return line, lr.n, bad, nil
		case bufio.ErrBufferFull:
			continue
		default:
			return nil, 0, false, err
		}
	}
}

// rest returns the unterminated last line at EOF, if any (n is 0 if there is none).
func (lr *lineReader) rest() ([]byte, int, bool) {
	if lr.size == 0 {
		return nil, 0, false
	}
	line, bad := lr.buf, lr.tooLong || lr.size > maxReadLine
	lr.buf, lr.size, lr.tooLong = nil, 0, false
	lr.n++
	return line, lr.n, bad
}

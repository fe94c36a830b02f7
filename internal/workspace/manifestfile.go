package workspace

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// The manifest file (SaveManifest, LoadManifest): manifestMagic, then one
// record per entry: its key in the manifest, a flag byte (bit 0: Path is
// not the key and follows; bit 1: Opaque), then the fields in Entry's
// order, strings as a uvarint length and their bytes, integers as varints.
// It replaced encoding/gob, whose package initialiser (~0.15 ms) every
// airlock process paid, used or not. Only airlock writes these, in the
// state dir, but a read trusts no length it finds.
const manifestMagic = "airlock-manifest-1\n"

// maxManifestString bounds one string of a record: a path, a link target
// or a reason is far shorter.
const maxManifestString = 1 << 20

const (
	flagOwnPath = 1 << iota
	flagOpaque
)

// SaveManifest stores m at p.
func SaveManifest(p string, m Manifest) error {
	return writeAtomic(p, func(w io.Writer) error {
		b := []byte(manifestMagic)
		for k, e := range m {
			b = appendString(b, k)
			var flags byte
			if e.Path != k {
				flags |= flagOwnPath
			}
			if e.Opaque {
				flags |= flagOpaque
			}
			b = append(b, flags)
			if e.Path != k {
				b = appendString(b, e.Path)
			}
			b = append(b, byte(e.Type))
			b = binary.AppendUvarint(b, uint64(e.Mode))
			b = binary.AppendVarint(b, e.Size)
			for _, s := range []string{e.SHA256, e.Link, e.Other, e.Unreadable} {
				b = appendString(b, s)
			}
			for _, u := range []uint64{e.Dev, e.Ino, e.Rdev} {
				b = binary.AppendUvarint(b, u)
			}
			for _, n := range []int64{e.Mtime, e.Ctime, e.Stamp} {
				b = binary.AppendVarint(b, n)
			}
			if len(b) >= 64<<10 {
				if _, err := w.Write(b); err != nil {
					return err
				}
				b = b[:0]
			}
		}
		_, err := w.Write(b)
		return err
	})
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// LoadManifest reads what SaveManifest stored.
func LoadManifest(p string) (Manifest, error) {
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("read manifest %s: %w", p, err)
	}
	defer f.Close()
	m, err := readManifest(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", p, err)
	}
	return m, nil
}

func readManifest(r *bufio.Reader) (Manifest, error) {
	magic := make([]byte, len(manifestMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != manifestMagic {
		return nil, errors.New("not a manifest this airlock writes (one of an older version's sandboxes? review it with that version, or discard it)")
	}
	d := &manifestReader{r: r}
	m := Manifest{}
	for {
		if _, err := r.Peek(1); err == io.EOF {
			return m, nil
		}
		k := d.string()
		flags := d.byte()
		e := Entry{Path: k, Opaque: flags&flagOpaque != 0}
		if flags&flagOwnPath != 0 {
			e.Path = d.string()
		}
		e.Type = Type(d.byte())
		e.Mode = uint32(d.uvarint())
		e.Size = d.varint()
		for _, s := range []*string{&e.SHA256, &e.Link, &e.Other, &e.Unreadable} {
			*s = d.string()
		}
		for _, u := range []*uint64{&e.Dev, &e.Ino, &e.Rdev} {
			*u = d.uvarint()
		}
		for _, n := range []*int64{&e.Mtime, &e.Ctime, &e.Stamp} {
			*n = d.varint()
		}
		if d.err != nil {
			return nil, fmt.Errorf("entry %d: %w", len(m)+1, d.err)
		}
		m[k] = e
	}
}

// manifestReader reads a record's fields, keeping the first error (a
// torn file's io.ErrUnexpectedEOF); every read after it gives zeros.
type manifestReader struct {
	r   *bufio.Reader
	err error
}

func (d *manifestReader) fail(err error) {
	if d.err == nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		d.err = err
	}
}

func (d *manifestReader) byte() byte {
	if d.err != nil {
		return 0
	}
	c, err := d.r.ReadByte()
	d.fail(err)
	return c
}

func (d *manifestReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	u, err := binary.ReadUvarint(d.r)
	d.fail(err)
	return u
}

func (d *manifestReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	n, err := binary.ReadVarint(d.r)
	d.fail(err)
	return n
}

func (d *manifestReader) string() string {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return ""
	}
	if n > maxManifestString {
		d.fail(fmt.Errorf("a string of %d bytes", n))
		return ""
	}
	b := make([]byte, n)
	_, err := io.ReadFull(d.r, b)
	d.fail(err)
	return string(b)
}

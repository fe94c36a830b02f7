package workspace

import (
	"bufio"
	"bytes"
	"encoding/gob"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sampleManifest() Manifest {
	return Manifest{
		"a/b.txt": {Path: "a/b.txt", Type: TypeFile, Mode: 0o4755, Size: 1 << 40, SHA256: strings.Repeat("ab", 32),
			Dev: 1<<64 - 1, Ino: 12345, Mtime: -1, Ctime: 1_700_000_000_123_456_789, Stamp: 42},
		"link":          {Path: "link", Type: TypeSymlink, Link: "../../etc/passwd"},
		"dir":           {Path: "dir", Type: TypeDir, Mode: 0o755, Opaque: true},
		"odd\nname\xff": {Path: "odd\nname\xff", Type: TypeOther, Other: "char device 0:0", Rdev: 7},
		"gone":          {Path: "gone", Other: deletedMark},
		"keyed":         {Path: "not/the/key", Type: TypeFile, Unreadable: "permission denied"},
		"":              {},
	}
}

func TestManifestFileKeepsEveryField(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m")
	for _, m := range []Manifest{sampleManifest(), {}} {
		if err := SaveManifest(p, m); err != nil {
			t.Fatal(err)
		}
		got, err := LoadManifest(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("read back\n%#v\nwant\n%#v", got, m)
		}
	}
}

// A torn file, another format (an older airlock's gob) or a length past
// the end is an error that names the file, never a partial manifest.
func TestManifestFileRefusesWhatItDidNotWrite(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := SaveManifest(good, sampleManifest()); err != nil {
		t.Fatal(err)
	}
	if m, err := LoadManifest(good); err != nil || len(m) != len(sampleManifest()) { // control
		t.Fatalf("the good file: %d entries, %v", len(m), err)
	}
	b, _ := os.ReadFile(good)
	var old bytes.Buffer
	if err := gob.NewEncoder(&old).Encode(sampleManifest()); err != nil {
		t.Fatal(err)
	}
	huge := append([]byte(manifestMagic), 0xff, 0xff, 0xff, 0xff, 0x0f) // a key of 4 GiB
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"torn":            {b[:len(b)-3], "unexpected EOF"},
		"gob":             {old.Bytes(), "older version"},
		"a huge string":   {huge, "a string of"},
		"empty":           {nil, "older version"},
		"magic cut short": {[]byte(manifestMagic[:5]), "older version"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(p, c.data, 0o600)
		m, err := LoadManifest(p)
		if err == nil || m != nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, %v; want an error naming %s and saying %q", name, m, err, p, c.want)
		}
	}
}

func FuzzReadManifest(f *testing.F) {
	p := filepath.Join(f.TempDir(), "m")
	if err := SaveManifest(p, sampleManifest()); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	f.Add(b)
	f.Add([]byte(manifestMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := readManifest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		// What it read, it writes back and reads again the same.
		q := filepath.Join(t.TempDir(), "m")
		if err := SaveManifest(q, m); err != nil {
			t.Fatal(err)
		}
		again, err := LoadManifest(q)
		if err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

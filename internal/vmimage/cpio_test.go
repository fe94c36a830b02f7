package vmimage

import (
	"bytes"
	"fmt"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// cpioEntry is one entry read back by readNewc.
type cpioEntry struct {
	name  string
	mode  uint32
	nlink uint32
	data  string
}

// readNewc parses a newc archive by the kernel's buffer-format spec: the
// "070701" magic, 13 eight-digit hex fields, the NUL-terminated name padded
// to four bytes, the data padded to four bytes, up to TRAILER!!!.
func readNewc(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	for {
		if off+110 > len(b) {
			t.Fatalf("archive ends at %d without a trailer", off)
		}
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		mode, nlink, size, namesize := field(1), field(4), int(field(6)), int(field(11))
		nameEnd := off + 110 + namesize
		if b[nameEnd-1] != 0 {
			t.Fatalf("name at %d is not NUL-terminated", off)
		}
		name := string(b[off+110 : nameEnd-1])
		dataOff := (nameEnd + 3) &^ 3
		data := string(b[dataOff : dataOff+size])
		off = (dataOff + size + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, cpioEntry{name, mode, nlink, data})
	}
}

func TestWriteCPIO(t *testing.T) {
	var buf bytes.Buffer
	err := WriteCPIO(&buf, []CPIOFile{
		{Name: "/init", Mode: 0o755, Data: []byte("#!airlock")},
		{Name: "lib/modules/6.1/virtio.ko", Mode: 0o644, Data: []byte("ELF...")},
		{Name: "lib/modules/6.1/" + OrderFile, Mode: 0o644, Data: []byte("virtio.ko\n")},
		{Name: "lib/modules", Mode: fs.ModeDir | 0o700}, // already written as a parent: not again
		{Name: "bin/sh", Mode: fs.ModeSymlink, Data: []byte("/init")},
		{Name: "tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	})
	if err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive is %d bytes, not a multiple of four", buf.Len())
	}
	var got []string
	for _, e := range readNewc(t, buf.Bytes()) {
		got = append(got, fmt.Sprintf("%s %o %d %q", e.name, e.mode, e.nlink, e.data))
	}
	want := []string{
		`init 100755 1 "#!airlock"`,
		`lib 40755 2 ""`,
		`lib/modules 40755 2 ""`,
		`lib/modules/6.1 40755 2 ""`,
		`lib/modules/6.1/virtio.ko 100644 1 "ELF..."`,
		`lib/modules/6.1/airlock.order 100644 1 "virtio.ko\n"`,
		`bin 40755 2 ""`,
		`bin/sh 120777 1 "/init"`,
		`tmp 40777 2 ""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The same archive as GNU cpio lists it, when cpio is installed.
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Log("cpio is not installed: checked against the format spec only")
		return
	}
	cmd := exec.Command("cpio", "-t", "--quiet")
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -t: %v", err)
	}
	wantNames := "init\nlib\nlib/modules\nlib/modules/6.1\nlib/modules/6.1/virtio.ko\nlib/modules/6.1/airlock.order\nbin\nbin/sh\ntmp\n"
	if string(out) != wantNames {
		t.Errorf("cpio -t lists:\n%s\nwant:\n%s", out, wantNames)
	}
}

func TestWriteCPIORefuses(t *testing.T) {
	for name, f := range map[string]CPIOFile{
		"a name climbing out":    {Name: "../etc/passwd", Mode: 0o644},
		"the root itself":        {Name: "/", Mode: fs.ModeDir | 0o755},
		"a device node":          {Name: "dev/null", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666},
		"a named pipe":           {Name: "fifo", Mode: fs.ModeNamedPipe | 0o644},
		"an empty name, cleaned": {Name: "", Mode: 0o644},
	} {
		t.Run(name, func(t *testing.T) {
			if err := WriteCPIO(&bytes.Buffer{}, []CPIOFile{f}); err == nil {
				t.Error("written")
			}
		})
	}
}

// Two archives written by WriteCPIO concatenate into one the kernel reads
// in turn: the backend appends /init's archive to modules.cpio.
func TestWriteCPIOConcatenates(t *testing.T) {
	var a, b bytes.Buffer
	WriteCPIO(&a, []CPIOFile{{Name: "lib/x.ko", Mode: 0o644, Data: []byte("x")}})
	WriteCPIO(&b, []CPIOFile{{Name: "init", Mode: 0o755, Data: []byte("y")}})
	first := readNewc(t, a.Bytes())
	second := readNewc(t, b.Bytes())
	if len(first) != 2 || len(second) != 1 || second[0].name != "init" {
		t.Errorf("got %v then %v", first, second)
	}
}

package link

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/sys/unix"
)

// frames builds a stream of length-prefixed frames.
func frames(fs ...string) []byte {
	var b []byte
	for _, f := range fs {
		b = AppendStreamHeader(b, len(f))
		b = append(b, f...)
	}
	return b
}

// chunks is a reader that returns its pieces one per Read, as a socket
// returns what has arrived.
type chunks [][]byte

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	if n == len((*c)[0]) {
		*c = (*c)[1:]
	} else {
		(*c)[0] = (*c)[0][n:]
	}
	return n, nil
}

func readAll(fr *FrameReader) ([]string, error) {
	var got []string
	for {
		f, err := fr.Next()
		if err != nil {
			return got, err
		}
		got = append(got, string(f))
	}
}

func TestFrameReader(t *testing.T) {
	three := frames("alpha", "b", "gamma-delta")
	tests := map[string]struct {
		reads   [][]byte
		want    []string
		wantErr error
	}{
		"several frames in one read": {reads: [][]byte{three}, want: []string{"alpha", "b", "gamma-delta"}, wantErr: io.EOF},
		"frames split across reads":  {reads: [][]byte{three[:2], three[2:7], three[7:11], three[11:]}, want: []string{"alpha", "b", "gamma-delta"}, wantErr: io.EOF},
		"no frames at all":           {reads: nil, wantErr: io.EOF},
		"truncated header":           {reads: [][]byte{frames("alpha"), {0, 0}}, want: []string{"alpha"}, wantErr: io.ErrUnexpectedEOF},
		"truncated frame":            {reads: [][]byte{frames("alpha")[:7]}, wantErr: io.ErrUnexpectedEOF},
		"zero length ends the link":  {reads: [][]byte{frames("alpha"), {0, 0, 0, 0}, frames("never")}, want: []string{"alpha"}, wantErr: ErrFrameSize},
		"oversize length ends the link before its bytes arrive": {
			reads: [][]byte{frames("ok"), {0, 0, 0x05, 0xef}}, want: []string{"ok"}, wantErr: ErrFrameSize},
		"a huge length ends the link":   {reads: [][]byte{{0xff, 0xff, 0xff, 0xff}}, wantErr: ErrFrameSize},
		"a frame at the bound is taken": {reads: [][]byte{frames(strings.Repeat("x", 1514))}, want: []string{strings.Repeat("x", 1514)}, wantErr: io.EOF},
		"one byte over the bound is not": {
			reads: [][]byte{frames(strings.Repeat("x", 1515))}, wantErr: ErrFrameSize},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := chunks(tt.reads)
			got, err := readAll(NewFrameReader(&c, 1514))
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("error = %v, want %v", err, tt.wantErr)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("frames = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFrameReaderByteAtATime(t *testing.T) {
	var want []string
	for i := range 200 {
		want = append(want, strings.Repeat(string(rune('a'+i%26)), 1+i*7%1514))
	}
	src := frames(want...)
	for name, r := range map[string]io.Reader{
		"one byte per read": iotest.OneByteReader(bytes.NewReader(src)),
		"half reads":        iotest.HalfReader(bytes.NewReader(src)),
		"error with data":   iotest.DataErrReader(bytes.NewReader(src)),
	} {
		got, err := readAll(NewFrameReader(r, 1514))
		if err != io.EOF || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: %d frames, %v; want %d frames, EOF", name, len(got), err, len(want))
		}
	}
}

func TestFrameReaderErrorsStick(t *testing.T) {
	c := chunks{{0, 0, 0, 0}, frames("late")}
	fr := NewFrameReader(&c, 1514)
	for range 3 {
		if _, err := fr.Next(); !errors.Is(err, ErrFrameSize) {
			t.Fatalf("Next = %v, want ErrFrameSize every time", err)
		}
	}
}

func TestFrameReaderAllocatesOnlyItsBuffer(t *testing.T) {
	src := bytes.NewReader(nil)
	stream := frames(strings.Repeat("f", 1514), "s", strings.Repeat("m", 600))
	fr := NewFrameReader(src, 1514)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(stream)
		for range 3 {
			if _, err := fr.Next(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per three frames", allocs)
	}
}

// FuzzStreamFrames feeds arbitrary bytes, in arbitrary pieces, to the
// frame reader: it must not panic, must return only frames within the
// bound that match a reference parse, and must stop at the first bad
// length.
func FuzzStreamFrames(f *testing.F) {
	f.Add(frames("alpha", "b"), uint8(3))
	f.Add([]byte{0, 0, 0, 0}, uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2}, uint8(0))
	f.Add(frames(strings.Repeat("z", 100))[:50], uint8(7))
	const limit = 128
	f.Fuzz(func(t *testing.T, data []byte, split uint8) {
		var c chunks
		for rest, i := data, 0; len(rest) > 0; i++ {
			n := min(len(rest), 1+int(split)*(i+1)%251)
			c = append(c, rest[:n])
			rest = rest[n:]
		}
		fr := NewFrameReader(&c, limit)
		// The smallest buffer the reader could work with, so that partial
		// frames are moved to its front often.
		fr.buf = fr.buf[:2*(StreamHeaderSize+limit)]
		got, err := readAll(fr)

		// Reference: walk the bytes directly.
		var want []string
		var wantErr error = io.EOF
		for rest := data; ; {
			if len(rest) == 0 {
				break
			}
			if len(rest) < 4 {
				wantErr = io.ErrUnexpectedEOF
				break
			}
			n := int(uint32(rest[0])<<24 | uint32(rest[1])<<16 | uint32(rest[2])<<8 | uint32(rest[3]))
			if n == 0 || n > limit {
				wantErr = ErrFrameSize
				break
			}
			if len(rest) < 4+n {
				wantErr = io.ErrUnexpectedEOF
				break
			}
			want = append(want, string(rest[4:4+n]))
			rest = rest[4+n:]
		}
		if !errors.Is(err, wantErr) {
			t.Fatalf("error %v, want %v", err, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("%d frames, want %d", len(got), len(want))
		}
		for i := range got {
			if len(got[i]) > limit || got[i] != want[i] {
				t.Fatalf("frame %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
}

func TestValidate(t *testing.T) {
	pair := func(typ int) *os.File {
		fds, err := unix.Socketpair(unix.AF_UNIX, typ, 0) // the test execs nothing: no SOCK_CLOEXEC (none on darwin)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fds[1])
		f := os.NewFile(uintptr(fds[0]), "socket")
		t.Cleanup(func() { f.Close() })
		return f
	}
	stream, dgram, seqpacket := pair(unix.SOCK_STREAM), pair(unix.SOCK_DGRAM), pair(unix.SOCK_SEQPACKET)
	regular, err := os.CreateTemp(t.TempDir(), "frames")
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	tests := map[string]struct {
		l  Link
		ok bool
	}{
		"a stream socket is a Stream link":          {Link{Stream, stream}, true},
		"a datagram socket is a Datagram link":      {Link{Datagram, dgram}, true},
		"a seqpacket socket is a Datagram link":     {Link{Datagram, seqpacket}, true},
		"a seqpacket socket can stand in for a TAP": {Link{TAP, seqpacket}, true},
		"a stream socket is no Datagram link":       {Link{Datagram, stream}, false},
		"a stream socket is no TAP":                 {Link{TAP, stream}, false},
		"a datagram socket is no Stream link":       {Link{Stream, dgram}, false},
		"a regular file is no link":                 {Link{TAP, regular}, false},
		"a link needs a descriptor":                 {Link{Stream, nil}, false},
		"the zero kind is not a kind":               {Link{0, stream}, false},
		"a kind past the last is not a kind":        {Link{Stream + 1, stream}, false},
	}
	for name, tt := range tests {
		err := tt.l.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
	if tun, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0); err == nil {
		defer tun.Close()
		if err := (Link{TAP, tun}).Validate(); err != nil {
			t.Errorf("a character device as TAP: %v", err)
		}
	}
}

func TestString(t *testing.T) {
	for k, want := range map[Kind]string{TAP: "tap", Datagram: "datagram", Stream: "stream", 9: "link.Kind(9)"} {
		if k.String() != want {
			t.Errorf("Kind(%d).String() = %q", k, k.String())
		}
	}
	if s := (Link{Kind: Stream}).String(); s != "stream link without a descriptor" {
		t.Errorf("String() = %q", s)
	}
	fd, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "vm.sock")
	defer f.Close()
	if s := (Link{Kind: Datagram, File: f}).String(); s != fmt.Sprintf("datagram link on vm.sock (fd %d)", fd) {
		t.Errorf("String() = %q", s)
	}
}

package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
)

func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	a, bf, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	b, err := FileConn(bf)
	bf.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestRoundTripKeepsFields(t *testing.T) {
	a, b := pair(t)
	want := &Msg{ID: 7, Op: OpExec, Exec: &Exec{Argv: []string{"sh", "-c", "true"}, Env: []string{"A=1"}, TTY: true, Rows: 24, Cols: 80}}
	if err := a.Send(want); err != nil {
		t.Fatal(err)
	}
	got, files, err := b.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 0 || got.ID != 7 || got.Op != OpExec || strings.Join(got.Exec.Argv, " ") != "sh -c true" || got.Exec.Cols != 80 {
		t.Fatalf("Recv() = %+v %+v, want %+v", got, got.Exec, want.Exec)
	}
}

func TestDescriptorsTravelWithTheirFrame(t *testing.T) {
	a, b := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	// A message without descriptors first, then one with two, then another without.
	for _, m := range []struct {
		msg   *Msg
		files []*os.File
	}{{&Msg{ID: 1, Op: OpReady}, nil}, {&Msg{ID: 2, Op: OpStarted}, []*os.File{r, w}}, {&Msg{ID: 3, Op: OpReady}, nil}} {
		if err := a.Send(m.msg, m.files...); err != nil {
			t.Fatal(err)
		}
	}
	wantFDs := []int{0, 2, 0}
	var got []*os.File
	for i, want := range wantFDs {
		m, files, err := b.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != uint32(i+1) || len(files) != want {
			t.Fatalf("message %d: id %d with %d files, want %d", i+1, m.ID, len(files), want)
		}
		got = append(got, files...)
	}
	// The received write end must reach the original pipe.
	if _, err := got[1].Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read through passed fd = %q, %v", buf, err)
	}
	for _, f := range got {
		f.Close()
	}
}

func TestPartialFramesAreReassembled(t *testing.T) {
	c1, c2 := net.Pipe() // not a Unix socket: exercise ReadFrame on a byte stream
	defer c1.Close()
	frame, err := Encode(&Msg{ID: 9, Op: OpOutput, Stream: 1, Data: bytes.Repeat([]byte("x"), 1000)})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for _, b := range frame { // one byte at a time
			c2.Write([]byte{b})
		}
		c2.Close()
	}()
	body, err := ReadFrame(c1, MaxFrame)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(body)
	if err != nil || m.ID != 9 || len(m.Data) != 1000 {
		t.Fatalf("Decode = %+v, %v", m, err)
	}
}

func TestOversizedFrameIsRefusedBeforeAllocation(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<31)
	_, err := ReadFrame(bytes.NewReader(hdr[:]), MaxFrame)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("ReadFrame(2 GiB header) = %v, want ErrFrameTooLarge", err)
	}
	if _, err := Encode(&Msg{Op: OpWriteFile, Data: make([]byte, MaxFrame+1)}); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Encode(oversized) = %v, want ErrFrameTooLarge", err)
	}
}

func TestConnRejectsLiesAboutDescriptors(t *testing.T) {
	a, b := pair(t)
	frame, _ := Encode(&Msg{ID: 1, Op: OpStarted, NFDs: 2}) // claims fds, sends none
	if _, err := a.uc.Write(frame); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Recv(); err == nil || !strings.Contains(err.Error(), "descriptors") {
		t.Fatalf("Recv() error = %v, want a descriptor-count error", err)
	}
}

func TestRecvEOF(t *testing.T) {
	a, b := pair(t)
	a.CloseWrite()
	if _, _, err := b.Recv(); err != io.EOF {
		t.Fatalf("Recv() after peer close = %v, want io.EOF", err)
	}
}

func TestDecodeRejectsUnknownOp(t *testing.T) {
	for _, body := range [][]byte{{0xa1, 0x02, 0x00}, {0xa1, 0x02, 0x18, 0xff}, {0xff}, {}} {
		if _, err := Decode(body); err == nil {
			t.Errorf("Decode(%x) succeeded, want error", body)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	for _, m := range []*Msg{
		{ID: 1, Op: OpInit, Init: &Init{Hostname: "h", Mounts: []Mount{{Kind: MountBind, Source: "/", Target: "/"}}}},
		{ID: 2, Op: OpExec, Exec: &Exec{Argv: []string{"true"}}},
		{ID: 3, Op: OpResult, Files: []FileInfo{{Name: "a", Size: 1}}},
	} {
		b, _ := Encode(m)
		f.Add(b)
	}
	f.Add([]byte{0, 0, 0, 1, 0xff})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		body, err := ReadFrame(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		m, err := Decode(body)
		if err != nil {
			return
		}
		// Whatever decodes must encode again.
		if _, err := Encode(m); err != nil && !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("re-encode of decoded %v failed: %v", m.Op, err)
		}
	})
}

// pipes is a byte stream made of two pipes: no descriptor can cross it.
type pipes struct {
	r *os.File
	w *os.File
}

func (p pipes) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipes) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipes) Close() error                { p.w.Close(); return p.r.Close() }

func streamPair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	ar, bw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	br, aw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	a, b := StreamConn(pipes{ar, aw}), StreamConn(pipes{br, bw})
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestStreamConnCarriesMessagesNotFiles(t *testing.T) {
	a, b := streamPair(t)
	if a.PassesFiles() {
		t.Fatal("a StreamConn says it passes files")
	}
	if err := a.Send(&Msg{ID: 1, Op: OpStarted}, os.Stdin); !errors.Is(err, ErrNoFiles) {
		t.Fatalf("Send(with a file) = %v, want ErrNoFiles", err)
	}
	big := bytes.Repeat([]byte("x"), 200<<10) // several reads, more than a pipe holds
	sent := make(chan error, 1)
	go func() {
		for i := range 3 {
			if err := a.Send(&Msg{ID: uint32(i), Op: OpOutput, Data: big}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for i := range 3 {
		m, files, err := b.Recv()
		if err != nil || len(files) != 0 || m.ID != uint32(i) || !bytes.Equal(m.Data, big) {
			t.Fatalf("Recv() = %v, %d files, %v", m, len(files), err)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, _, err := b.Recv(); err != io.EOF {
		t.Fatalf("Recv() after peer close = %v, want io.EOF", err)
	}
}

func TestStreamConnRejectsGarbage(t *testing.T) {
	for name, junk := range map[string][]byte{
		"a frame claiming descriptors": func() []byte { b, _ := Encode(&Msg{ID: 1, Op: OpStarted, NFDs: 1}); return b }(),
		"a huge length":                {0x7f, 0xff, 0xff, 0xff, 1, 2, 3},
		"a body that is not CBOR":      {0, 0, 0, 3, 0xff, 0xff, 0xff},
		"a frame cut short":            {0, 0, 0, 9, 0xa1},
	} {
		t.Run(name, func(t *testing.T) {
			a, b := streamPair(t)
			go func() { a.rw.Write(junk); a.Close() }()
			if _, _, err := b.Recv(); err == nil || err == io.EOF {
				t.Fatalf("Recv() = %v, want an error", err)
			}
		})
	}
}

// The same bytes split anyhow decode to the same messages, and nothing a
// peer sends makes Recv panic or yield a descriptor.
func FuzzStreamConn(f *testing.F) {
	one, _ := Encode(&Msg{ID: 1, Op: OpOutput, Stream: 1, Data: []byte("hi")})
	two, _ := Encode(&Msg{ID: 2, Op: OpExit, Exit: &Exit{Code: 3}})
	f.Add(append(one, two...), uint8(1))
	f.Add([]byte{0, 0, 0, 1, 0xff}, uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, chunk uint8) {
		c := StreamConn(&chunked{b: b, n: int(chunk)%7 + 1})
		for range 64 {
			_, files, err := c.Recv()
			if len(files) != 0 {
				t.Fatal("a StreamConn yielded descriptors")
			}
			if err != nil {
				return
			}
		}
	})
}

// chunked yields b at most n bytes per Read.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}
func (c *chunked) Write(p []byte) (int, error) { return len(p), nil }
func (c *chunked) Close() error                { return nil }

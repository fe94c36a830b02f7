package vfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func msg(n int, fill byte) []byte {
	b := bytes.Repeat([]byte{fill}, n)
	binary.NativeEndian.PutUint32(b, uint32(n))
	return b
}

func TestSplitter(t *testing.T) {
	stream := append(append(msg(16, 1), msg(100, 2)...), msg(16, 3)...)
	sp := newSplitter(bytes.NewReader(stream), 16, 100)
	for i, want := range []int{16, 100, 16} {
		m, err := sp.next()
		if err != nil || len(m) != want || m[5] != byte(i+1) {
			t.Fatalf("message %d: %d bytes, %v", i, len(m), err)
		}
	}
	if _, err := sp.next(); err != io.EOF {
		t.Fatalf("end: %v, want EOF", err)
	}
	for _, bad := range [][]byte{msg(101, 0), msg(15, 0), {0xff, 0xff, 0xff, 0xff}, {0, 0, 0, 0}} {
		if _, err := newSplitter(bytes.NewReader(bad), 16, 100).next(); !errors.Is(err, ErrBadMessage) {
			t.Errorf("% x: %v, want ErrBadMessage", bad[:4], err)
		}
	}
	if _, err := newSplitter(bytes.NewReader(msg(50, 0)[:30]), 16, 100).next(); err != io.ErrUnexpectedEOF {
		t.Errorf("cut message: %v", err)
	}
}

// FuzzSplitter: any byte stream yields only messages within bounds that
// are the stream's own bytes, then EOF, a cut message or ErrBadMessage.
func FuzzSplitter(f *testing.F) {
	f.Add(append(msg(16, 1), msg(40, 2)...))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 1, 2})
	f.Add(msg(64, 9)[:20])
	f.Fuzz(func(t *testing.T, data []byte) {
		sp := newSplitter(bytes.NewReader(data), 16, 64)
		var got []byte
		for {
			m, err := sp.next()
			if err != nil {
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrBadMessage) {
					t.Fatalf("error %v", err)
				}
				break
			}
			if len(m) < 16 || len(m) > 64 || int(binary.NativeEndian.Uint32(m)) != len(m) {
				t.Fatalf("message of %d bytes", len(m))
			}
			got = append(got, m...)
		}
		if !bytes.HasPrefix(data, got) {
			t.Fatal("messages are not the stream's bytes")
		}
	})
}

package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// StreamHeaderSize is the length of the header before each frame on a
// Stream link: the frame's length in bytes, not counting the header, as a
// big-endian uint32.
//
// This is QEMU's framing for -netdev stream and for -netdev socket on a
// stream socket (QEMU 7.2, net/stream.c and net/socket.c): the sender writes
// an iovec of { uint32_t len = htonl(size); buf } (net_stream_receive,
// net_socket_receive), and the receiver reassembles frames in
// net_fill_rstate (net/net.c), taking "rs->packet_len = ntohl(*(uint32_t
// *)rs->buf)" once four bytes have arrived, with no virtio-net header
// (vnet_hdr is false for both backends). QEMU itself refuses a frame longer
// than its NET_BUFSIZE buffer; we refuse anything longer than an Ethernet
// frame at the link's MTU.
const StreamHeaderSize = 4

// ErrFrameSize says a Stream link announced a frame of length zero or
// longer than the reader's bound. The stream cannot be trusted past it.
var ErrFrameSize = errors.New("link: stream frame length out of bounds")

// AppendStreamHeader appends the header for a frame of n bytes to b.
func AppendStreamHeader(b []byte, n int) []byte {
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// FrameReader reads the frames of a Stream link. It reads as much as the
// source has ready into one buffer, allocated once, so a read may bring
// several frames or part of one; a length outside 1..limit ends the stream
// with ErrFrameSize before any of that frame is read.
type FrameReader struct {
	src  io.Reader
	max  int
	buf  []byte
	r, w int   // buf[r:w] is read and not yet returned
	err  error // from src, returned once buf[r:w] holds no complete frame
}

// minBuffer is the least a FrameReader reads into, so that small frames
// arrive many to a read.
const minBuffer = 64 << 10

// NewFrameReader reads frames of at most limit bytes (header excluded) from
// src. It allocates its buffer now and never again.
func NewFrameReader(src io.Reader, limit int) *FrameReader {
	if limit < 1 || limit > 1<<24 {
		panic(fmt.Sprintf("link: frame bound %d out of range", limit))
	}
	return &FrameReader{src: src, max: limit, buf: make([]byte, max(minBuffer, 2*(StreamHeaderSize+limit)))}
}

// Next returns the next frame, valid until the following call. At the end
// of src it returns io.EOF if the last frame was whole, else
// io.ErrUnexpectedEOF; after a bad length, ErrFrameSize (wrapped); after
// either, the same error forever.
func (fr *FrameReader) Next() ([]byte, error) {
	empty := 0
	for {
		if avail := fr.buf[fr.r:fr.w]; len(avail) >= StreamHeaderSize {
			n := binary.BigEndian.Uint32(avail)
			if n == 0 || n > uint32(fr.max) {
				if !errors.Is(fr.err, ErrFrameSize) {
					fr.err = fmt.Errorf("%w: %d bytes announced, the bound is %d", ErrFrameSize, n, fr.max)
				}
				return nil, fr.err
			}
			if end := StreamHeaderSize + int(n); len(avail) >= end {
				fr.r += end
				return avail[StreamHeaderSize:end:end], nil
			}
		}
		if fr.err != nil {
			if fr.err == io.EOF && fr.r != fr.w {
				fr.err = io.ErrUnexpectedEOF
			}
			return nil, fr.err
		}
		// Room for a whole frame after what is buffered, so one read may
		// complete it: move the partial frame to the front if need be.
		if fr.r == fr.w {
			fr.r, fr.w = 0, 0
		} else if len(fr.buf)-fr.r < StreamHeaderSize+fr.max {
			fr.w = copy(fr.buf, fr.buf[fr.r:fr.w])
			fr.r = 0
		}
		n, err := fr.src.Read(fr.buf[fr.w:])
		if n < 0 || n > len(fr.buf)-fr.w {
			fr.err = errors.New("link: source returned an impossible count")
			continue
		}
		fr.w += n
		fr.err = err
		if n == 0 && err == nil {
			if empty++; empty > 100 {
				fr.err = io.ErrNoProgress
			}
		}
	}
}

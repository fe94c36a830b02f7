package gateway

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/airlock-dev/airlock/internal/secrets"
)

// A WebSocket through the gateway is relayed frame by frame when something
// must look inside it: secret values scrubbed from what the server sends,
// placeholders swapped or refused in what the sandbox sends, LLM usage read
// from the server's text messages. Otherwise its bytes are copied as they
// are. The parser (RFC 6455) never holds a whole frame: a payload is handled
// in the pieces it arrives in, each sent on as a fragment of the same
// message (an intermediary that saw the handshake may re-fragment a message
// that uses no extension, RFC 6455 §5.4), so memory does not depend on what
// a hostile peer claims a frame's length is.

const (
	wsMaxControl = 125      // RFC 6455 §5.5
	wsReadChunk  = 32 << 10 // server bytes read at a time
)

// Close codes the relay sends when it must end a connection.
const (
	wsCloseNormal   = 1000
	wsCloseProtocol = 1002
	wsClosePolicy   = 1008
)

var (
	errWSProtocol = errors.New("websocket protocol error")
	errDropping   = errors.New("refused: dropping what the sandbox sends")
)

// wsDir is one direction of a relayed WebSocket: a push parser that turns
// the bytes it is fed into output frames appended to out.
type wsDir struct {
	fromClient bool            // client frames are masked, and must be re-masked on output
	xf         *secrets.Stream // payload rewrite; nil: unchanged
	ctl        func([]byte) ([]byte, error)
	tap        func(p []byte, end bool) // text message payloads, end at a message's end; nil: none
	gate       func() error             // asked before each data message is passed on; an error ends the connection

	hdr     [14]byte
	nh      int
	inFrame bool
	fin     bool
	op      byte
	remain  uint64
	mask    [4]byte
	masked  bool
	mpos    int
	inMsg   bool
	msgOp   byte
	started bool   // the message's first output fragment is out (later ones are continuations)
	ctlBuf  []byte // a control frame's payload (at most 125 bytes)
	scratch []byte // unmasked payload piece
	xbuf    []byte // rewritten payload piece
	out     []byte // frames ready to send
	stop    string // set by tap: end the connection after what is out, for this reason
}

// headerLen is the length of the frame header whose first two bytes are b0, b1.
func headerLen(b1 byte) int {
	n := 2
	switch b1 & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if b1&0x80 != 0 {
		n += 4
	}
	return n
}

// feed parses p, appending output frames to d.out.
func (d *wsDir) feed(p []byte) error {
	for len(p) > 0 && d.stop == "" {
		if !d.inFrame {
			need := 2
			if d.nh >= 2 {
				need = headerLen(d.hdr[1])
			}
			n := copy(d.hdr[d.nh:need], p)
			d.nh += n
			p = p[n:]
			if d.nh < need {
				continue
			}
			if need == 2 && headerLen(d.hdr[1]) > 2 {
				continue // the rest of the header comes next
			}
			if err := d.startFrame(); err != nil {
				return err
			}
			if d.remain == 0 {
				if err := d.endFrame(); err != nil {
					return err
				}
			}
			continue
		}
		n := int(min(d.remain, uint64(len(p)), wsReadChunk))
		d.remain -= uint64(n)
		if err := d.payload(p[:n]); err != nil {
			return err
		}
		p = p[n:]
		if d.remain == 0 {
			if err := d.endFrame(); err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *wsDir) startFrame() error {
	h := d.hdr[:d.nh]
	d.nh = 0
	b0, b1 := h[0], h[1]
	d.fin, d.op = b0&0x80 != 0, b0&0x0f
	if b0&0x70 != 0 {
		// No extension was offered (the relay strips the offer), so none
		// may be in use; a compressed payload could not be scanned.
		return fmt.Errorf("%w: reserved bits set (an extension nobody negotiated)", errWSProtocol)
	}
	d.masked = b1&0x80 != 0
	if d.fromClient && !d.masked {
		return fmt.Errorf("%w: unmasked frame from the client", errWSProtocol)
	}
	h = h[2:]
	switch l := b1 & 0x7f; l {
	case 126:
		d.remain, h = uint64(binary.BigEndian.Uint16(h)), h[2:]
	case 127:
		d.remain, h = binary.BigEndian.Uint64(h), h[8:]
		if d.remain>>63 != 0 {
			return fmt.Errorf("%w: frame length with its top bit set", errWSProtocol)
		}
	default:
		d.remain = uint64(l)
	}
	if d.masked {
		copy(d.mask[:], h)
	}
	d.mpos = 0
	switch {
	case d.op >= 8 && d.op <= 10:
		if !d.fin || d.remain > wsMaxControl {
			return fmt.Errorf("%w: control frame fragmented or longer than %d bytes", errWSProtocol, wsMaxControl)
		}
		d.ctlBuf = d.ctlBuf[:0]
	case d.op == 1 || d.op == 2:
		if d.inMsg {
			return fmt.Errorf("%w: a new message began before the last one ended", errWSProtocol)
		}
		if d.gate != nil {
			if err := d.gate(); err != nil {
				return err
			}
		}
		d.inMsg, d.msgOp, d.started = true, d.op, false
	case d.op == 0:
		if !d.inMsg {
			return fmt.Errorf("%w: continuation frame outside a message", errWSProtocol)
		}
	default:
		return fmt.Errorf("%w: unknown opcode %d", errWSProtocol, d.op)
	}
	d.inFrame = true
	return nil
}

// payload handles one piece of the current frame's payload.
func (d *wsDir) payload(p []byte) error {
	if d.masked {
		d.scratch = append(d.scratch[:0], p...)
		for i := range d.scratch {
			d.scratch[i] ^= d.mask[(d.mpos+i)&3]
		}
		d.mpos += len(p)
		p = d.scratch
	}
	if d.op >= 8 {
		d.ctlBuf = append(d.ctlBuf, p...)
		return nil
	}
	if d.tap != nil && d.msgOp == 1 {
		d.tap(p, false)
	}
	out, err := d.xf.Push(d.xbuf[:0], p)
	if err != nil {
		d.xbuf = out[:0]
		d.dataFrame(false, out) // the text before the placeholder is clean
		return err
	}
	if d.remain == 0 && d.fin {
		// The message ends with this piece: send it as one frame, so a
		// message that came in one frame leaves in one.
		return d.endMessage(out)
	}
	d.xbuf = out[:0]
	d.dataFrame(false, out)
	return nil
}

// endMessage sends the message's last fragment: out plus what was held back.
func (d *wsDir) endMessage(out []byte) error {
	out, err := d.xf.Flush(out)
	d.xbuf = out[:0]
	if err != nil {
		return err
	}
	if d.tap != nil && d.msgOp == 1 {
		d.tap(nil, true)
	}
	d.dataFrame(true, out)
	d.inMsg = false
	return nil
}

func (d *wsDir) endFrame() error {
	d.inFrame = false
	if d.op >= 8 {
		p := d.ctlBuf
		if d.ctl != nil {
			var err error
			if p, err = d.ctl(p); err != nil {
				return err
			}
		}
		if len(p) > wsMaxControl {
			// A placeholder is longer than the value it replaced: keep a
			// close frame's status code, drop the rest.
			p = p[:min(len(p), 2)]
			if d.op != 8 {
				p = nil
			}
		}
		d.frame(true, d.op, p)
		return nil
	}
	if !d.fin || !d.inMsg {
		// Not the end, or the end already sent with the last piece: what is
		// held back goes out with the next fragment.
		return nil
	}
	return d.endMessage(d.xbuf[:0])
}

// dataFrame sends a fragment of the current message; empty ones only to end it.
func (d *wsDir) dataFrame(fin bool, p []byte) {
	if !fin && len(p) == 0 {
		return
	}
	op := byte(0)
	if !d.started {
		op, d.started = d.msgOp, true
	}
	d.frame(fin, op, p)
}

// frame appends one frame; toward the server it is masked with a fresh key.
func (d *wsDir) frame(fin bool, op byte, p []byte) {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var mbit byte
	if d.fromClient {
		mbit = 0x80
	}
	switch n := len(p); {
	case n <= 125:
		d.out = append(d.out, b0, mbit|byte(n))
	case n <= 0xffff:
		d.out = append(d.out, b0, mbit|126)
		d.out = binary.BigEndian.AppendUint16(d.out, uint16(n))
	default:
		d.out = append(d.out, b0, mbit|127)
		d.out = binary.BigEndian.AppendUint64(d.out, uint64(n))
	}
	if !d.fromClient {
		d.out = append(d.out, p...)
		return
	}
	var key [4]byte
	rand.Read(key[:])
	d.out = append(d.out, key[:]...)
	start := len(d.out)
	d.out = append(d.out, p...)
	for i := range d.out[start:] {
		d.out[start+i] ^= key[i&3]
	}
}

// closeFrame appends a close frame with code and a reason cut to fit.
func (d *wsDir) closeFrame(code uint16, reason string) {
	p := binary.BigEndian.AppendUint16(nil, code)
	p = append(p, reason[:min(len(reason), wsMaxControl-2)]...)
	d.frame(true, 8, p)
}

// wsConn is the upstream side of an upgraded connection as the reverse
// proxy sees it: Read gives what goes to the sandbox, Write takes what the
// sandbox sends. A nil direction is copied unchanged.
type wsConn struct {
	rwc  io.ReadWriteCloser
	down *wsDir // server → sandbox
	up   *wsDir // sandbox → server
	// fail is told why the relay ended a connection (for the audit record).
	fail func(decision, reason string)

	rbuf []byte
	off  int
	rerr error
	// refused is why Write refused the sandbox's next message (the budget):
	// Write closes the upstream, and Read, woken by that, tells the sandbox.
	refused atomic.Pointer[string]

	wmu  sync.Mutex
	werr error
}

func (c *wsConn) Close() error { return c.rwc.Close() }

func (c *wsConn) Read(p []byte) (int, error) {
	if c.down == nil {
		return c.rwc.Read(p)
	}
	for {
		if c.off < len(c.down.out) {
			n := copy(p, c.down.out[c.off:])
			c.off += n
			return n, nil
		}
		if c.rerr != nil {
			return 0, c.rerr
		}
		c.down.out, c.off = c.down.out[:0], 0
		if c.rbuf == nil {
			c.rbuf = make([]byte, wsReadChunk)
		}
		n, err := c.rwc.Read(c.rbuf)
		if why := c.refused.Load(); why != nil {
			c.down.closeFrame(wsClosePolicy, "airlock: "+*why)
			c.rerr = errors.New(*why)
			continue
		}
		if ferr := c.down.feed(c.rbuf[:n]); ferr != nil {
			code, decision := c.why(ferr)
			c.fail(decision, "websocket from upstream: "+ferr.Error())
			c.down.closeFrame(code, "airlock: "+ferr.Error())
			err = ferr
		} else if why := c.down.stop; why != "" {
			c.down.closeFrame(wsClosePolicy, "airlock: "+why)
			err = errors.New(why)
		}
		c.rerr = err
	}
}

// refusal is a message the gate kept from the server.
type refusal struct{ why string }

func (r *refusal) Error() string { return r.why }

func (c *wsConn) why(err error) (uint16, string) {
	var leak *secrets.LeakError
	if errors.As(err, &leak) {
		return wsClosePolicy, "secret_blocked"
	}
	var ref *refusal
	if errors.As(err, &ref) {
		return wsCloseNormal, "deny"
	}
	return wsCloseProtocol, "error"
}

func (c *wsConn) Write(p []byte) (int, error) {
	if c.up == nil {
		return c.rwc.Write(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr == errDropping {
		return len(p), nil
	}
	if c.werr != nil {
		return 0, c.werr
	}
	c.up.out = c.up.out[:0]
	ferr := c.up.feed(p)
	var ref *refusal
	if errors.As(ferr, &ref) {
		// Before the server hears of it (and closes, waking Read): Read
		// must know to tell the sandbox why.
		c.refused.Store(&ref.why)
	}
	if ferr != nil {
		code, decision := c.why(ferr)
		c.fail(decision, "websocket from the sandbox: "+ferr.Error())
		c.up.closeFrame(code, "") // the reason (a secret's name) is for the audit log, not the server
	}
	if _, err := c.rwc.Write(c.up.out); err != nil && ref == nil {
		c.werr = err
		return 0, err
	}
	if ref != nil {
		// Read, woken by the close, tells the sandbox why and then ends the
		// relay. Until then what the sandbox sends is dropped, not refused:
		// an error here would end the relay before the sandbox heard why.
		c.rwc.Close()
		c.werr = errDropping
		return len(p), nil
	}
	if ferr != nil {
		c.werr = ferr
		return 0, ferr
	}
	return len(p), nil
}

// isWebSocket reports whether h asks for (or agrees to) a WebSocket.
func isWebSocket(h http.Header) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get("Upgrade")), "websocket")
}

package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/secrets"
)

// wsFrame is one frame as a test peer sees it.
type wsFrame struct {
	fin     bool
	op      byte
	payload []byte
}

// writeWSFrame writes one frame, masked when mask (a client's) is set.
func writeWSFrame(w io.Writer, fin bool, op byte, p []byte, mask bool) error {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var mbit byte
	if mask {
		mbit = 0x80
	}
	h := []byte{b0}
	switch n := len(p); {
	case n <= 125:
		h = append(h, mbit|byte(n))
	case n <= 0xffff:
		h = binary.BigEndian.AppendUint16(append(h, mbit|126), uint16(n))
	default:
		h = binary.BigEndian.AppendUint64(append(h, mbit|127), uint64(n))
	}
	body := bytes.Clone(p)
	if mask {
		key := [4]byte{0x12, 0x34, 0x56, 0x78}
		h = append(h, key[:]...)
		for i := range body {
			body[i] ^= key[i&3]
		}
	}
	_, err := w.Write(append(h, body...))
	return err
}

// readWSFrame reads one frame of any size up to 16 MiB, unmasking it.
func readWSFrame(r io.Reader) (wsFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return wsFrame{}, err
	}
	f := wsFrame{fin: h[0]&0x80 != 0, op: h[0] & 0x0f}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return f, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return f, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 16<<20 {
		return f, fmt.Errorf("frame of %d bytes", n)
	}
	var key [4]byte
	if h[1]&0x80 != 0 {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return f, err
		}
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return f, err
	}
	if h[1]&0x80 != 0 {
		for i := range f.payload {
			f.payload[i] ^= key[i&3]
		}
	}
	return f, nil
}

// readWSMessage reads frames until a data message is complete; control
// frames met on the way are returned too.
func readWSMessage(r io.Reader) (op byte, msg []byte, ctl []wsFrame, err error) {
	for {
		f, err := readWSFrame(r)
		if err != nil {
			return op, msg, ctl, err
		}
		if f.op >= 8 {
			ctl = append(ctl, f)
			if f.op == 8 {
				return 8, msg, ctl, nil
			}
			continue
		}
		if f.op != 0 {
			op = f.op
		}
		msg = append(msg, f.payload...)
		if f.fin {
			return op, msg, ctl, nil
		}
	}
}

// wsUpstream is a TLS server that accepts a WebSocket upgrade and hands the
// connection and the request to serve.
func wsUpstream(t *testing.T, h2 bool, serve func(r *http.Request, c net.Conn, br *bufio.Reader)) *httptest.Server {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isWebSocket(r.Header) {
			http.Error(w, "want a websocket upgrade", 400)
			return
		}
		sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
		serve(r, c, brw.Reader)
	}))
	up.EnableHTTP2 = h2
	up.StartTLS()
	t.Cleanup(up.Close)
	return up
}

// wsThrough opens a WebSocket to example.com through the gateway's front
// door, sending head (extra header lines) with the upgrade.
func wsThrough(t *testing.T, f *fixture, target, head string) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	conn, br := connectThrough(t, f.proxy, "example.com:443")
	t.Cleanup(func() { conn.Close() })
	tc := tls.Client(bufConn{conn, br}, &tls.Config{ServerName: "example.com", RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
	tc.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n", target, head)
	tbr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tbr, nil)
	if err != nil || resp.StatusCode != 101 {
		b := ""
		if resp != nil {
			bb, _ := io.ReadAll(resp.Body)
			b = string(bb)
		}
		t.Fatalf("upgrade: %v %v %s", resp, err, b)
	}
	return tc, tbr
}

func secretSet(t *testing.T, specs ...*secrets.Secret) *secrets.Set {
	t.Helper()
	s, err := secrets.NewSet(specs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newSecret(t *testing.T, name, value string, inBody bool, hosts ...string) *secrets.Secret {
	t.Helper()
	s, err := secrets.New(name, []byte(value), hosts)
	if err != nil {
		t.Fatal(err)
	}
	s.InBody = inBody
	return s
}

// TestWebSocketWithASecretIsUpgradedSwappedAndScrubbed: with a secret for
// the host, the upgrade passes (HTTP/2 upstream or not), the placeholder in
// its headers and URL arrives as the value, the compression offer is
// withdrawn, and the value never comes back: not split across fragments,
// not in binary or control frames, not split across two messages.
func TestWebSocketWithASecretIsUpgradedSwappedAndScrubbed(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("upstream HTTP/2 %v", h2), func(t *testing.T) {
			const real = "sk-real-websocket-value-0123456789"
			sec := newSecret(t, "API_KEY", real, false, "example.com")
			ph := sec.Placeholder
			type seen struct {
				auth, query, ext string
				msg              []byte
			}
			got := make(chan seen, 1)
			up := wsUpstream(t, h2, func(r *http.Request, c net.Conn, br *bufio.Reader) {
				s := seen{auth: r.Header.Get("Authorization"), query: r.URL.Query().Get("key"), ext: r.Header.Get("Sec-WebSocket-Extensions")}
				_, s.msg, _, _ = readWSMessage(br)
				got <- s
				// The value in three fragments cut mid-value, with a ping in between.
				writeWSFrame(c, false, 1, []byte("token="+real[:3]), false)
				writeWSFrame(c, false, 0, []byte(real[3:9]), false)
				writeWSFrame(c, true, 9, []byte("ping "+real), false)
				writeWSFrame(c, true, 0, []byte(real[9:]+" end"), false)
				// Binary, one byte per fragment.
				for i := 0; i < len(real); i++ {
					op := byte(0)
					if i == 0 {
						op = 2
					}
					writeWSFrame(c, i == len(real)-1, op, []byte{real[i]}, false)
				}
				// Split across two messages.
				writeWSFrame(c, true, 1, []byte("first "+real[:10]), false)
				writeWSFrame(c, true, 1, []byte(real[10:]+" second"), false)
				writeWSFrame(c, true, 8, append([]byte{0x03, 0xe8}, real...), false)
				io.Copy(io.Discard, br)
			})
			f := newFixture(t, options{policy: allowExample(), secrets: secretSet(t, sec), static: map[string]netip.Addr{"example.com": loopback},
				ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
			tc, br := wsThrough(t, f, "/ws?key="+ph, "Authorization: Bearer "+ph+"\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n")
			if err := writeWSFrame(tc, true, 1, []byte("hello "+ph), true); err != nil {
				t.Fatal(err)
			}
			s := <-got
			if s.auth != "Bearer "+real || s.query != real {
				t.Errorf("upstream got Authorization %q and key %q, want the real value in both", s.auth, s.query)
			}
			if s.ext != "" {
				t.Errorf("the compression offer reached the upstream: %q", s.ext)
			}
			if string(s.msg) != "hello "+ph {
				t.Errorf("a frame from the sandbox arrived as %q: without :body the placeholder passes unchanged", s.msg)
			}

			op, msg, ctl, err := readWSMessage(br)
			if err != nil || op != 1 || string(msg) != "token="+ph+" end" {
				t.Errorf("fragmented text = %d %q %v, want the placeholder in place of the value", op, msg, err)
			}
			if len(ctl) != 1 || ctl[0].op != 9 || string(ctl[0].payload) == "" || bytes.Contains(ctl[0].payload, []byte(real)) {
				t.Errorf("ping between fragments = %+v: want it passed on without the value", ctl)
			}
			op, msg, _, err = readWSMessage(br)
			if err != nil || op != 2 || string(msg) != ph {
				t.Errorf("binary one byte per fragment = %d %q %v, want the placeholder", op, msg, err)
			}
			_, first, _, err1 := readWSMessage(br)
			_, second, _, err2 := readWSMessage(br)
			if err1 != nil || err2 != nil || bytes.Contains(append(first, second...), []byte(real)) ||
				!strings.HasPrefix(string(first), "first ") || !strings.HasSuffix(string(second), " second") {
				t.Errorf("a value split across two messages: %q + %q (%v %v): the two must not hold it together", first, second, err1, err2)
			}
			op, _, ctl, err = readWSMessage(br)
			if err != nil || op != 8 || len(ctl) != 1 || binary.BigEndian.Uint16(ctl[0].payload) != 1000 || bytes.Contains(ctl[0].payload, []byte(real)) {
				t.Errorf("close = %d %+v %v: want code 1000 and no value", op, ctl, err)
			}
		})
	}
}

// TestWebSocketFramesFromTheSandboxFollowTheBodyRules: a :body secret's
// placeholder is swapped in frames even when split across fragments; another
// host's placeholder ends the connection and is audited.
func TestWebSocketFramesFromTheSandboxFollowTheBodyRules(t *testing.T) {
	const real = "sk-body-secret-value-42"
	mine := newSecret(t, "API_KEY", real, true, "example.com")
	other := newSecret(t, "OTHER_KEY", "sk-other-value-99", false, "other.test")
	got := make(chan []byte, 2)
	up := wsUpstream(t, false, func(r *http.Request, c net.Conn, br *bufio.Reader) {
		for {
			op, msg, _, err := readWSMessage(br)
			if err != nil || op == 8 {
				close(got)
				return
			}
			got <- msg
		}
	})
	f := newFixture(t, options{policy: allowExample(), secrets: secretSet(t, mine, other), static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
	tc, br := wsThrough(t, f, "/ws", "")
	ph := mine.Placeholder
	writeWSFrame(tc, false, 1, []byte("key "+ph[:20]), true)
	writeWSFrame(tc, true, 0, []byte(ph[20:]+"!"), true)
	if msg := <-got; string(msg) != "key "+real+"!" {
		t.Errorf("upstream got %q, want the :body secret's value in place of its placeholder", msg)
	}
	writeWSFrame(tc, true, 1, []byte("exfil "+other.Placeholder), true)
	if msg, ok := <-got; ok {
		t.Errorf("upstream got %q: another host's placeholder must end the connection", msg)
	}
	waitRecord(t, f, func(r audit.Record) bool { return r.Kind == "http" && r.Decision == "secret_blocked" })
	// The sandbox's side is closed too.
	io.Copy(io.Discard, br)
}

// TestHostileWebSocketServersAreCutOffOrBounded: frames that break RFC
// 6455 end the connection with a close frame; a frame claiming a huge
// length is relayed in pieces as it arrives, never held whole.
func TestHostileWebSocketServersAreCutOffOrBounded(t *testing.T) {
	const real = "sk-hostile-server-secret"
	tests := map[string]struct {
		send      func(c net.Conn)
		wantClose uint16 // 0: the data must arrive
	}{
		"reserved bits set (a compressed frame nobody negotiated)": {
			send:      func(c net.Conn) { c.Write([]byte{0xc1, 0x03, 'a', 'b', 'c'}) },
			wantClose: wsCloseProtocol,
		},
		"a control frame longer than 125 bytes": {
			send:      func(c net.Conn) { writeWSFrame(c, true, 9, bytes.Repeat([]byte("x"), 200), false) },
			wantClose: wsCloseProtocol,
		},
		"a fragmented control frame": {
			send:      func(c net.Conn) { writeWSFrame(c, false, 9, []byte("x"), false) },
			wantClose: wsCloseProtocol,
		},
		"a continuation outside a message": {
			send:      func(c net.Conn) { writeWSFrame(c, true, 0, []byte("x"), false) },
			wantClose: wsCloseProtocol,
		},
		"a new message inside a message": {
			send: func(c net.Conn) {
				writeWSFrame(c, false, 1, []byte("x"), false)
				writeWSFrame(c, true, 1, []byte("y"), false)
			},
			wantClose: wsCloseProtocol,
		},
		"an unknown opcode": {
			send:      func(c net.Conn) { writeWSFrame(c, true, 5, nil, false) },
			wantClose: wsCloseProtocol,
		},
		"a length with its top bit set": {
			send:      func(c net.Conn) { c.Write([]byte{0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0}) },
			wantClose: wsCloseProtocol,
		},
		"a frame claiming a terabyte, then 4 MiB and the end": {
			send: func(c net.Conn) {
				h := binary.BigEndian.AppendUint64([]byte{0x82, 0x7f}, 1<<40)
				c.Write(h)
				chunk := bytes.Repeat([]byte("z"), 64<<10)
				copy(chunk[100:], real)
				for i := 0; i < 64; i++ {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sec := newSecret(t, "API_KEY", real, false, "example.com")
			up := wsUpstream(t, false, func(r *http.Request, c net.Conn, br *bufio.Reader) { tt.send(c) })
			f := newFixture(t, options{policy: allowExample(), secrets: secretSet(t, sec), static: map[string]netip.Addr{"example.com": loopback},
				ports: map[uint16]string{443: up.Listener.Addr().String()}}, up.Certificate())
			_, br := wsThrough(t, f, "/ws", "")
			if tt.wantClose != 0 {
				var last wsFrame
				for {
					fr, err := readWSFrame(br)
					if err != nil {
						t.Fatalf("no close frame before the end (%v); last frame %+v", err, last)
					}
					last = fr
					if fr.op == 8 {
						break
					}
				}
				if code := binary.BigEndian.Uint16(last.payload); code != tt.wantClose {
					t.Errorf("close code %d, want %d (%q)", code, tt.wantClose, last.payload[2:])
				}
				waitRecord(t, f, func(r audit.Record) bool {
					return r.Kind == "http" && r.Decision == "error" && strings.Contains(r.Reason, "websocket")
				})
				return
			}
			var n int
			var all bytes.Buffer
			for {
				fr, err := readWSFrame(br)
				if err != nil {
					break
				}
				if fr.op >= 8 {
					t.Fatalf("unexpected control frame %+v", fr)
				}
				n += len(fr.payload)
				if all.Len() < 1<<20 {
					all.Write(fr.payload)
				}
			}
			if n < 4<<20 || bytes.Contains(all.Bytes(), []byte(real)) || !bytes.Contains(all.Bytes(), []byte(sec.Placeholder)) {
				t.Errorf("relayed %d bytes of the huge frame (want at least 4 MiB), value scrubbed: %v", n, !bytes.Contains(all.Bytes(), []byte(real)))
			}
		})
	}
}

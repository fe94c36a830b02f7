package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/airlock-dev/airlock/internal/policy"
)

// Bounds of a ClientHello read from the sandbox: a TLS record carries at most
// 2^14 bytes of plaintext (RFC 8446 5.1); a hello with post-quantum key
// shares is under 2 KiB, so 16 KiB over at most a few records is plenty.
const (
	maxRecordBody = 1 << 14
	maxHello      = 1 << 14
)

// readClientHello reads the TLS records that carry the first handshake
// message from r, which must be a ClientHello, and returns exactly the bytes
// it read (to be passed on) and the server name it asks for. It never reads
// past the last record of the hello. A hello without a server name, with more
// than one, with an encrypted inner hello (ECH: the real name would be
// hidden) or that is malformed is an error.
func readClientHello(r io.Reader) (raw []byte, sni string, err error) {
	var msg []byte // the handshake message, reassembled across records
	for {
		var hdr [5]byte
		if k, err := io.ReadFull(r, hdr[:]); err != nil {
			return append(raw, hdr[:k]...), "", fmt.Errorf("reading a TLS record: %w", err)
		}
		raw = append(raw, hdr[:]...)
		if hdr[0] != 22 { // handshake
			return raw, "", fmt.Errorf("not a TLS handshake (record type %d)", hdr[0])
		}
		if hdr[1] != 3 {
			return raw, "", errors.New("not TLS (record version)")
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if n == 0 || n > maxRecordBody || len(msg)+n > maxHello {
			return raw, "", fmt.Errorf("TLS record of %d bytes: out of bounds", n)
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if k, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start+k], "", fmt.Errorf("reading a TLS record: %w", err)
		}
		msg = append(msg, raw[start:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != 1 {
			return raw, "", fmt.Errorf("the first handshake message is type %d, not a ClientHello", msg[0])
		}
		want := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
		if want > maxHello {
			return raw, "", fmt.Errorf("ClientHello of %d bytes: too large", want)
		}
		if len(msg) < want {
			continue
		}
		if len(msg) > want {
			return raw, "", errors.New("bytes after the ClientHello in its record")
		}
		sni, err := helloServerName(msg[4:])
		return raw, sni, err
	}
}

// afterHello reads what a client sends after its first ClientHello, up to
// the first record that cannot begin a second one (at most two
// ChangeCipherSpec records, then one more record), and returns it to be
// passed on. A second ClientHello there is the answer to a
// HelloRetryRequest (RFC 8446 4.1.4): it must name host too, or a server
// that heeds the second could be steered to another name. The end of the
// stream is no error: what was read is returned.
func afterHello(r io.Reader, host string) ([]byte, error) {
	var raw []byte
	for ccs := 0; ; ccs++ {
		var hdr [5]byte
		if k, err := io.ReadFull(r, hdr[:]); err != nil {
			return append(raw, hdr[:k]...), nil
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		if n > maxRecordBody+256 { // TLSCiphertext's bound (RFC 8446 5.2)
			return nil, fmt.Errorf("TLS record of %d bytes after the ClientHello: out of bounds", n)
		}
		rec := make([]byte, 5+n)
		copy(rec, hdr[:])
		if k, err := io.ReadFull(r, rec[5:]); err != nil {
			return append(raw, rec[:5+k]...), nil
		}
		switch {
		case hdr[0] == 20 && ccs < 2: // ChangeCipherSpec (TLS 1.3 middlebox compatibility)
			raw = append(raw, rec...)
			continue
		case hdr[0] == 22 && n > 0 && rec[5] == 1: // a handshake record that starts a ClientHello
			hello, sni, err := readClientHello(io.MultiReader(bytes.NewReader(rec), r))
			if err == nil && !sameHost(sni, host) {
				err = fmt.Errorf("SNI %q does not name the host %s", sni, host)
			}
			if err != nil {
				return nil, fmt.Errorf("second ClientHello: %w", err)
			}
			return append(raw, hello...), nil
		}
		return append(raw, rec...), nil
	}
}

// helloServerName parses a ClientHello body (RFC 8446 4.1.2) down to its
// server_name extension (RFC 6066 3).
func helloServerName(b []byte) (string, error) {
	c := cursor{b: b}
	c.skip(2 + 32)    // legacy_version, random
	c.skip(c.u8())    // legacy_session_id
	suites := c.u16() // cipher_suites
	if suites%2 != 0 || suites == 0 {
		return "", errors.New("malformed ClientHello (cipher suites)")
	}
	c.skip(suites)
	if comp := c.u8(); comp == 0 {
		return "", errors.New("malformed ClientHello (compression methods)")
	} else {
		c.skip(comp)
	}
	if c.bad {
		return "", errors.New("malformed ClientHello")
	}
	if len(c.b) == 0 {
		return "", errors.New("the ClientHello names no server (no extensions)")
	}
	ext := cursor{b: c.bytes(c.u16())}
	if c.bad || len(c.b) != 0 {
		return "", errors.New("malformed ClientHello (extensions length)")
	}
	var name string
	seen := map[int]bool{}
	for len(ext.b) > 0 {
		typ := ext.u16()
		body := cursor{b: ext.bytes(ext.u16())}
		if ext.bad {
			return "", errors.New("malformed ClientHello (an extension)")
		}
		if seen[typ] {
			return "", fmt.Errorf("ClientHello repeats extension %d", typ)
		}
		seen[typ] = true
		switch typ {
		case 0xfe0d: // encrypted_client_hello
			return "", errors.New("the ClientHello hides its real server name (encrypted ClientHello)")
		case 0: // server_name
			list := cursor{b: body.bytes(body.u16())}
			if body.bad || len(body.b) != 0 {
				return "", errors.New("malformed server_name extension")
			}
			for len(list.b) > 0 {
				kind := list.u8()
				n := list.bytes(list.u16())
				if list.bad {
					return "", errors.New("malformed server_name extension")
				}
				if kind != 0 { // only host_name is defined; anything else is refused
					return "", fmt.Errorf("server_name of unknown type %d", kind)
				}
				if name != "" {
					return "", errors.New("the ClientHello names more than one server")
				}
				name = string(n)
				if name == "" {
					return "", errors.New("empty server name")
				}
			}
		}
	}
	if name == "" {
		return "", errors.New("the ClientHello names no server (no SNI)")
	}
	shown := name // quoted into the audit log: keep it short
	if len(shown) > 80 {
		shown = shown[:80] + "..."
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return "", fmt.Errorf("server name %q is an address", shown)
	}
	n, err := policy.NormalizeName(name)
	if err != nil {
		return "", fmt.Errorf("server name %q: %v", shown, err)
	}
	return n, nil
}

// cursor reads big-endian fields; a read past the end sets bad and yields zeros.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) bytes(n int) []byte {
	if c.bad || n > len(c.b) {
		c.bad = true
		return nil
	}
	out := c.b[:n]
	c.b = c.b[n:]
	return out
}

func (c *cursor) skip(n int) { c.bytes(n) }

func (c *cursor) u8() int {
	b := c.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (c *cursor) u16() int {
	b := c.bytes(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

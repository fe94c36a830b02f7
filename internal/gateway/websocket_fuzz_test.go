package gateway

import (
	"bytes"
	"testing"

	"github.com/airlock-dev/airlock/internal/secrets"
)

// FuzzWebSocketRelay feeds arbitrary bytes, cut into arbitrary pieces, to
// the server→sandbox frame relay with a secret. Whatever comes in, what
// goes out is well-formed frames whose data payloads, read in order across
// all messages, never hold the value; and a valid stream without the value
// comes out with the same payload bytes.
func FuzzWebSocketRelay(f *testing.F) {
	const real = "SECRETVAL"
	frame := func(fin bool, op byte, p string) []byte {
		var b bytes.Buffer
		writeWSFrame(&b, fin, op, []byte(p), false)
		return b.Bytes()
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	f.Add(frame(true, 1, "hello"), uint8(3))
	f.Add(cat(frame(false, 1, "a SEC"), frame(true, 9, "p"), frame(true, 0, "RETVAL b")), uint8(1))
	f.Add(cat(frame(true, 2, "xxSECRE"), frame(true, 1, "TVALyy")), uint8(7))
	f.Add(cat(frame(true, 1, string(make([]byte, 300))), frame(true, 8, "\x03\xe8SECRETVAL")), uint8(2))
	f.Add([]byte{0x82, 0x7f, 0, 0, 0, 1, 0, 0, 0, 0, 'S', 'E'}, uint8(5))
	sec, err := secrets.New("K", []byte(real), []string{"example.com"})
	if err != nil {
		f.Fatal(err)
	}
	set, _ := secrets.NewSet(sec)
	body, err := secrets.New("B", []byte("BODYVALUE"), []string{"example.com"})
	if err != nil {
		f.Fatal(err)
	}
	body.InBody = true
	other, _ := secrets.New("O", []byte("OTHERVAL"), []string{"other.test"})
	upSet, _ := secrets.NewSet(body, other)
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		// The sandbox's direction: masked frames, placeholders swapped or
		// refused; whatever happens, the output is masked frames.
		up := &wsDir{fromClient: true, xf: upSet.SwapStream("example.com"), gate: func() error { return nil }}
		for i := 0; i < len(in); i += int(cut)%17 + 1 {
			if up.feed(in[i:min(i+int(cut)%17+1, len(in))]) != nil {
				break
			}
		}
		for r := bytes.NewReader(up.out); r.Len() > 0; {
			if up.out[len(up.out)-r.Len()+1]&0x80 == 0 {
				t.Fatalf("an unmasked frame toward the server")
			}
			if _, err := readWSFrame(r); err != nil {
				t.Fatalf("output toward the server is not frames: %v", err)
			}
		}

		d := &wsDir{xf: set.RedactStream(), ctl: func(p []byte) ([]byte, error) { return []byte(set.RedactString(string(p))), nil }}
		step := int(cut)%17 + 1
		var ferr error
		for i := 0; i < len(in) && ferr == nil; i += step {
			ferr = d.feed(in[i:min(i+step, len(in))])
		}
		// Parse the output with a plain reader: it must be frames.
		r := bytes.NewReader(d.out)
		var data []byte
		for r.Len() > 0 {
			fr, err := readWSFrame(r)
			if err != nil {
				t.Fatalf("output is not frames: %v", err)
			}
			if fr.op >= 8 {
				if len(fr.payload) > wsMaxControl {
					t.Fatalf("control frame of %d bytes", len(fr.payload))
				}
				continue
			}
			data = append(data, fr.payload...)
		}
		if bytes.Contains(data, []byte(real)) {
			t.Fatalf("the value went out: %q", data)
		}
		if ferr == nil && !d.inFrame && !d.inMsg && d.nh == 0 {
			want := payloads(t, in)
			if want != nil && !bytes.Contains(want, []byte(real)) && !bytes.Equal(want, data) {
				t.Fatalf("payloads changed: %q, want %q", data, want)
			}
		}
	})
}

// payloads returns the data payloads of a valid frame stream, nil if the
// stream has control frames (their payloads may be rewritten) or errors.
func payloads(t *testing.T, in []byte) []byte {
	r := bytes.NewReader(in)
	out := []byte{}
	for r.Len() > 0 {
		fr, err := readWSFrame(r)
		if err != nil || fr.op >= 8 {
			return nil
		}
		out = append(out, fr.payload...)
	}
	return out
}

package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// readers yields every way the tests feed a stream: split at each boundary, one byte
// at a time, half reads, and the last bytes arriving with io.EOF.
func readers(in []byte) map[string]func() io.Reader {
	rs := map[string]func() io.Reader{
		"one byte":   func() io.Reader { return iotest.OneByteReader(bytes.NewReader(in)) },
		"half":       func() io.Reader { return iotest.HalfReader(bytes.NewReader(in)) },
		"data + EOF": func() io.Reader { return iotest.DataErrReader(bytes.NewReader(in)) },
		"whole":      func() io.Reader { return bytes.NewReader(in) },
	}
	for i := 0; i <= len(in); i++ {
		rs[fmt.Sprintf("split at %d", i)] = func() io.Reader {
			return io.MultiReader(bytes.NewReader(in[:i]), bytes.NewReader(in[i:]))
		}
	}
	return rs
}

func TestSwapBodyAtEveryBoundary(t *testing.T) {
	ts := newTestSet(t)
	ph := ts.body.Placeholder
	tests := []struct {
		name string
		host string
		in   string
		want string
		leak string
	}{
		{"an InBody secret is swapped toward its host", "api.example.com", `{"key":"` + ph + `"}`, `{"key":"` + ts.bodyV + `"}`, ""},
		{"placeholders at both ends are swapped", "example.com", ph + " and " + ph, ts.bodyV + " and " + ts.bodyV, ""},
		{"a near-miss is left alone", "example.com", ph[:len(ph)-1] + "!" + ph[:5], ph[:len(ph)-1] + "!" + ph[:5], ""},
		{"a secret without InBody passes unchanged toward its host", "api.x.com", "k=" + ts.token.Placeholder, "k=" + ts.token.Placeholder, ""},
		{"an InBody secret toward another host is a leak", "evil.com", "x=" + ph + "&y", "x=", "BODY"},
		{"a header-only secret toward another host is a leak too", "api.example.com", "k=" + ts.token.Placeholder, "k=", "TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for how, r := range readers([]byte(tt.in)) {
				got, err := io.ReadAll(ts.set.SwapBody(tt.host, r()))
				if tt.leak != "" {
					assertLeak(t, err, tt.leak, tt.host)
					if string(got) != tt.want {
						t.Fatalf("%s: before the leak got %q, want %q", how, got, tt.want)
					}
					continue
				}
				if err != nil || string(got) != tt.want {
					t.Fatalf("%s: got %q, %v; want %q", how, got, err, tt.want)
				}
			}
		})
	}
}

func TestRedactAtEveryBoundary(t *testing.T) {
	a := mustNew(t, "A", "abcdefgh", "x.com")
	b := mustNew(t, "B", "abcdefghij", "x.com") // a longer value with A's as a prefix
	c := mustNew(t, "C", "ghijklmn", "x.com")   // overlaps B's end
	set, err := NewSet(a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb, pc := a.Placeholder, b.Placeholder, c.Placeholder
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"a value is redacted", "token=abcdefgh;", "token=" + pa + ";"},
		{"the longest value at a place wins", "abcdefghij!", pb + "!"},
		{"the leftmost value wins an overlap", "abcdefghijklmn", pb + "klmn"},
		{"a prefix of a value at the end passes", "xxabcdefg", "xxabcdefg"},
		{"values back to back are all redacted", "abcdefghabcdefghghijklmn", pa + pa + pc},
		{"text without values is unchanged", "data: hello\n\n", "data: hello\n\n"},
		{"an empty stream stays empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := set.RedactString(tt.in); got != tt.want {
				t.Fatalf("RedactString = %q, want %q", got, tt.want)
			}
			for how, r := range readers([]byte(tt.in)) {
				got, err := io.ReadAll(set.Redact(r()))
				if err != nil || string(got) != tt.want {
					t.Fatalf("%s: got %q, %v; want %q", how, got, err, tt.want)
				}
			}
		})
	}
}

func TestLeaksFindsValuesOnly(t *testing.T) {
	ts := newTestSet(t)
	if !ts.set.Leaks([]byte("x " + realValue + " y")) {
		t.Fatal("a value was not found")
	}
	if ts.set.Leaks([]byte(strings.Join(ts.set.Env(), " ") + realValue[:10])) {
		t.Fatal("placeholders or a partial value counted as a leak")
	}
}

// errAfter returns data, then err instead of io.EOF.
type errAfter struct {
	r   io.Reader
	err error
}

func (e *errAfter) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		err = e.err
	}
	return n, err
}

func TestRedactDropsAHeldBackPrefixWhenTheSourceFails(t *testing.T) {
	set, err := NewSet(mustNew(t, "A", realValue, "x.com"))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("connection reset")
	got, err := io.ReadAll(set.Redact(&errAfter{strings.NewReader("ok " + realValue[:12]), boom}))
	if !errors.Is(err, boom) || string(got) != "ok " {
		t.Fatalf("got %q, %v; want %q and the source's error", got, err, "ok ")
	}
}

func TestReadWithEmptyBufferReturnsNothing(t *testing.T) {
	ts := newTestSet(t)
	if n, err := ts.set.Redact(strings.NewReader(realValue)).Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
}

func TestAReaderThatNeverProgressesIsReported(t *testing.T) {
	ts := newTestSet(t)
	_, err := io.ReadAll(ts.set.Redact(iotest.ErrReader(nil)))
	if !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}

// TestStreamsDeliverEventsWithoutWaiting is the server-sent events case: each event must
// reach the sandbox before the server sends the next, except for a suffix that may be
// the start of a value.
func TestStreamsDeliverEventsWithoutWaiting(t *testing.T) {
	ts := newTestSet(t)
	for _, tt := range []struct {
		name   string
		stream func(io.Reader) io.Reader
		write  string
		want   string
	}{
		{"Redact passes an event at once", ts.set.Redact, "data: hello\n\n", "data: hello\n\n"},
		{"Redact holds back only what may start a value", ts.set.Redact, "data: " + realValue[:7], "data: "},
		{"SwapBody passes an event at once", func(r io.Reader) io.Reader { return ts.set.SwapBody("example.com", r) }, "data: hi\n\n", "data: hi\n\n"},
		{"SwapBody holds back only what may start a placeholder", func(r io.Reader) io.Reader { return ts.set.SwapBody("example.com", r) },
			"data: " + Marker[:5], "data: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pr.Close()
			r := tt.stream(pr)
			got := make(chan string)
			go func() {
				var all []byte
				buf := make([]byte, 64)
				for {
					n, err := r.Read(buf)
					all = append(all, buf[:n]...)
					if string(all) == tt.want || err != nil {
						got <- string(all)
						return
					}
				}
			}()
			go pw.Write([]byte(tt.write)) // the writer then stays silent: the stream is open
			select {
			case g := <-got:
				if g != tt.want {
					t.Fatalf("got %q, want %q", g, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%q was not delivered before more data came", tt.want)
			}
			pw.Close()
		})
	}
}

// bigStream generates n bytes of filler, then tail, without storing them.
type bigStream struct {
	left int64
	tail []byte
	fill []byte
}

func (b *bigStream) Read(p []byte) (int, error) {
	if b.left > 0 {
		n := copy(p[:min(int64(len(p)), b.left)], b.fill)
		b.left -= int64(n)
		return n, nil
	}
	if len(b.tail) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.tail)
	b.tail = b.tail[n:]
	return n, nil
}

// tailWriter counts bytes and keeps the last few.
type tailWriter struct {
	n    int64
	last [128]byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if len(p) >= len(w.last) {
		copy(w.last[:], p[len(p)-len(w.last):])
	} else {
		copy(w.last[:], w.last[len(p):])
		copy(w.last[len(w.last)-len(p):], p)
	}
	return len(p), nil
}

func TestRedactOf256MiBStaysInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 256 MiB")
	}
	set, err := NewSet(mustNew(t, "A", realValue, "x.com"))
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20
	// Filler full of value prefixes, so the replacer keeps holding bytes back.
	fill := bytes.Repeat([]byte("lorem "+realValue[:9]+" ipsum\n"), 4096)
	src := &bigStream{left: size, fill: fill, tail: []byte(realValue)}
	var w tailWriter
	buf := make([]byte, 64<<10)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := io.CopyBuffer(&w, set.Redact(src), buf); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
		t.Fatalf("redacting 256 MiB allocated %d bytes", alloc)
	}
	t.Logf("allocated %d bytes for %d MiB", after.TotalAlloc-before.TotalAlloc, size>>20)
	ph := set.secrets[0].Placeholder
	if w.n != size+int64(len(ph)) || !bytes.HasSuffix(w.last[:], []byte(ph)) {
		t.Fatalf("wrote %d bytes ending %q; want the placeholder at the end", w.n, w.last)
	}
}

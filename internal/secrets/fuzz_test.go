package secrets

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// expand turns marker bytes in fuzz data into whole patterns, so the fuzzer can place
// values and placeholders it cannot know.
func expand(data []byte, marks map[byte][]byte) []byte {
	var out []byte
	for _, c := range data {
		if p, ok := marks[c]; ok {
			out = append(out, p...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// naive is the reference: at each position the longest pattern that matches, else the
// byte. stop reports a pattern that ends the stream (a leak) instead.
func naive(in []byte, pats, repls [][]byte, stop func(i int) bool) (out []byte, stopped int) {
	for i := 0; i < len(in); {
		best := -1
		for k, p := range pats {
			if bytes.HasPrefix(in[i:], p) && (best < 0 || len(p) > len(pats[best])) {
				best = k
			}
		}
		if best < 0 {
			out = append(out, in[i])
			i++
			continue
		}
		if stop(best) {
			return out, best
		}
		out = append(out, repls[best]...)
		i += len(pats[best])
	}
	return out, -1
}

// splitReader reads in pieces whose sizes come from the fuzzer.
type splitReader struct {
	data  []byte
	sizes []byte
	i     int
}

func (s *splitReader) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := 1 + int(s.sizes[s.i%len(s.sizes)])%max(1, len(s.data))
	s.i++
	n = copy(p, s.data[:min(n, len(s.data))])
	s.data = s.data[n:]
	return n, nil
}

func streams(in, sizes []byte) []io.Reader {
	if len(sizes) == 0 {
		sizes = []byte{7}
	}
	return []io.Reader{
		bytes.NewReader(in),
		iotest.OneByteReader(bytes.NewReader(in)),
		iotest.HalfReader(bytes.NewReader(in)),
		&splitReader{data: in, sizes: sizes},
	}
}

func FuzzRedact(f *testing.F) {
	f.Add([]byte("x\xffy\xfe\xff\xff"), []byte("abcdefgh"), []byte("efghijkl"), []byte{3, 1})
	f.Add([]byte("\xff\xff\xfe"), []byte("aaaa"), []byte("aaaaaa"), []byte{1})
	f.Add([]byte("sk-RE\xff-"), []byte("sk-REAL"), []byte(""), []byte{2, 5})
	f.Add([]byte("abab\xffabab"), []byte("abab"), []byte("baba"), []byte{0})
	f.Fuzz(func(t *testing.T, data, v1, v2, sizes []byte) {
		if len(v1) < minValueLen || len(v1) > 64 || len(v2) > 64 || len(data) > 2048 {
			return
		}
		a, err := New("A", v1, []string{"x.com"})
		if err != nil {
			return
		}
		secrets := []*Secret{a}
		pats, repls := [][]byte{v1}, [][]byte{[]byte(a.Placeholder)}
		marks := map[byte][]byte{0xff: v1}
		if len(v2) >= minValueLen {
			b, err := New("B", v2, []string{"x.com"})
			if err != nil {
				return
			}
			secrets = append(secrets, b)
			pats, repls = append(pats, v2), append(repls, []byte(b.Placeholder))
			marks[0xfe] = v2
		}
		set, err := NewSet(secrets...)
		if err != nil {
			return // a value inside a placeholder, which NewSet rightly refuses
		}
		in := expand(data, marks)
		want, _ := naive(in, pats, repls, func(int) bool { return false })
		if len(secrets) == 1 && !bytes.Equal(want, bytes.ReplaceAll(in, v1, repls[0])) {
			t.Fatalf("the reference disagrees with bytes.ReplaceAll")
		}
		if got := set.RedactString(string(in)); got != string(want) {
			t.Fatalf("RedactString = %q, want %q", got, want)
		}
		for _, r := range streams(in, sizes) {
			got, err := io.ReadAll(set.Redact(r))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Redact = %q, %v; want %q", got, err, want)
			}
		}
		// Between placeholders no value may remain. (A value may straddle a placeholder's
		// edge, as in "x" + placeholder when a value is "xairl"; that is not the input's
		// value surviving, so cut the output at placeholders before looking.)
		sep := byte(0)
		for bytes.IndexByte(v1, sep) >= 0 || bytes.IndexByte(v2, sep) >= 0 {
			sep++
		}
		cut := want
		for _, p := range repls {
			cut = bytes.ReplaceAll(cut, p, []byte{sep})
		}
		if set.Leaks(cut) {
			t.Fatalf("a value survived redaction: %q", want)
		}
	})
}

func FuzzSwapBody(f *testing.F) {
	f.Add([]byte("x=\xff&y=\xfd\xff"), []byte{3, 9}, "a.com")
	f.Add([]byte("\xfd\xfd\xff\xfe\xff"), []byte{1}, "a.com")
	f.Add([]byte("k=\xfe"), []byte{4}, "b.com")
	f.Add([]byte("\xff"), []byte{2}, "evil.com")
	f.Fuzz(func(t *testing.T, data, sizes []byte, host string) {
		if len(data) > 1024 {
			return
		}
		a := mustNew(t, "A", "value-of-A-1234", "a.com")
		a.InBody = true
		b := mustNew(t, "B", "value-of-B-5678", "b.com")
		b.InBody = true
		set, err := NewSet(a, b)
		if err != nil {
			t.Fatal(err)
		}
		pa, pb := []byte(a.Placeholder), []byte(b.Placeholder)
		in := expand(data, map[byte][]byte{0xff: pa, 0xfe: pb, 0xfd: []byte(Marker), 0xfc: pa[:len(pa)-1]})
		h := canonHost(host)
		allowed := []bool{a.allowed(h), b.allowed(h)}
		want, stopped := naive(in, [][]byte{pa, pb}, [][]byte{a.val(), b.val()}, func(k int) bool { return !allowed[k] })
		for _, r := range streams(in, sizes) {
			got, err := io.ReadAll(set.SwapBody(host, r))
			if !bytes.Equal(got, want) {
				t.Fatalf("SwapBody(%q) = %q, want %q", host, got, want)
			}
			var le *LeakError
			switch {
			case stopped < 0 && err != nil:
				t.Fatalf("SwapBody(%q): unexpected error %v", host, err)
			case stopped >= 0 && (!errors.As(err, &le) || le.Secret != []string{"A", "B"}[stopped]):
				t.Fatalf("SwapBody(%q): error %v, want a leak of secret %d", host, err, stopped)
			}
			if bytes.Contains(got, pa) || bytes.Contains(got, pb) {
				t.Fatalf("a placeholder got through: %q", got)
			}
		}
	})
}

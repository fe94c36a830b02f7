package mcppolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// MaxArgs is the most bytes of arguments one call may carry: far more than
// any path or query needs, little enough that checking them stays cheap.
const MaxArgs = 1 << 20

// maxArgDepth bounds nesting, so a deep argument cannot exhaust the stack.
const maxArgDepth = 64

// DecodeArgs decodes a call's raw JSON arguments for Decide, refusing any
// that a server could decode differently from the policy: the server gets
// these exact bytes, so the policy must see what every decoder sees. It
// refuses invalid UTF-8 (decoders replace it by different rules), \u escapes
// of lone surrogates (Go makes U+FFFD, JavaScript keeps them, Python keeps
// them and fails later), NUL (C-based servers cut a path there), duplicate
// object keys (some decoders keep the first, others the last), nesting past
// 64 levels and more than MaxArgs bytes. Empty input and null are no
// arguments (nil); anything else must be an object.
func DecodeArgs(raw []byte) (map[string]any, error) {
	if len(raw) > MaxArgs {
		return nil, fmt.Errorf("arguments are %d bytes, over the limit of %d", len(raw), MaxArgs)
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("arguments are not valid UTF-8")
	}
	if !json.Valid(raw) {
		return nil, errors.New("arguments are not valid JSON")
	}
	if err := checkEscapes(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("arguments hold more than one JSON value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("arguments are %s, not an object", aType(v))
	}
	return m, nil
}

// checkEscapes walks the string literals of valid JSON and refuses \u0000
// and \u escapes of surrogates that do not form a pair.
func checkEscapes(raw []byte) error {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !in {
			in = c == '"'
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			i++
			if raw[i] != 'u' {
				continue
			}
			r := hex4(raw[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return errors.New(`arguments hold a NUL character (\u0000)`)
			case r >= 0xDC00 && r <= 0xDFFF:
				return fmt.Errorf(`arguments hold a lone surrogate (\u%04x): servers decode it differently`, r)
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
					return fmt.Errorf(`arguments hold a lone surrogate (\u%04x): servers decode it differently`, r)
				}
				lo := hex4(raw[i+3 : i+7])
				if lo < 0xDC00 || lo > 0xDFFF {
					return fmt.Errorf(`arguments hold a lone surrogate (\u%04x): servers decode it differently`, r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads four hex digits (json.Valid has checked they are).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// decodeValue decodes one value as json.Unmarshal into any would, refusing
// duplicate keys and deep nesting.
func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxArgDepth {
		return nil, fmt.Errorf("arguments are nested more than %d levels deep", maxArgDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	switch d := tok.(type) {
	case json.Delim:
		switch d {
		case '{':
			m := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("arguments: %w", err)
				}
				k := kt.(string)
				if _, dup := m[k]; dup {
					return nil, fmt.Errorf("arguments name %q twice: servers differ on which one counts", clip(k))
				}
				if m[k], err = decodeValue(dec, depth+1); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token()
			return m, err
		case '[':
			l := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token()
			return l, err
		}
		return nil, fmt.Errorf("arguments: unexpected %v", d)
	case string:
		if strings.IndexByte(d, 0) >= 0 {
			return nil, errors.New("arguments hold a NUL character")
		}
	}
	return tok, nil
}

// CheckStrings refuses decoded arguments (of a call whose raw bytes the
// proxy does not see: it re-encodes them) holding a string the policy and
// the server could read apart: NUL, or U+FFFD, the mark a decoder left
// where the bytes it was sent did not decode.
func CheckStrings(args map[string]any) error {
	var walk func(v any, depth int) error
	walk = func(v any, depth int) error {
		if depth > maxArgDepth {
			return fmt.Errorf("arguments are nested more than %d levels deep", maxArgDepth)
		}
		switch x := v.(type) {
		case string:
			if strings.IndexByte(x, 0) >= 0 {
				return errors.New("arguments hold a NUL character")
			}
			if strings.ContainsRune(x, utf8.RuneError) {
				return errors.New("arguments hold U+FFFD: bytes that were not valid UTF-8")
			}
		case map[string]any:
			for k, e := range x {
				if err := walk(k, depth+1); err != nil {
					return err
				}
				if err := walk(e, depth+1); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range x {
				if err := walk(e, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(args, 0)
}

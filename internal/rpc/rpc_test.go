package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
)

func TestDecodeRequest(t *testing.T) {
	for name, tc := range map[string]struct {
		line string
		code int    // 0: valid
		id   string // the id to answer with
	}{
		"a request":                  {`{"jsonrpc":"2.0","method":"exec","params":{"command":"x"},"id":1}`, 0, "1"},
		"a notification has no id":   {`{"jsonrpc":"2.0","method":"close"}`, 0, ""},
		"a string id is kept":        {`{"jsonrpc":"2.0","method":"close","id":"a"}`, 0, `"a"`},
		"null params are none":       {`{"jsonrpc":"2.0","method":"close","params":null,"id":2}`, 0, "2"},
		"truncated JSON is a parse":  {`{"jsonrpc":"2.0",`, CodeParse, ""},
		"a batch is refused":         {`[{"jsonrpc":"2.0","method":"close","id":1}]`, CodeInvalidRequest, ""},
		"the wrong version":          {`{"jsonrpc":"1.0","method":"close","id":3}`, CodeInvalidRequest, "3"},
		"no method":                  {`{"jsonrpc":"2.0","id":4}`, CodeInvalidRequest, "4"},
		"a method that is no string": {`{"jsonrpc":"2.0","method":7,"id":5}`, CodeInvalidRequest, "5"},
		"an object id":               {`{"jsonrpc":"2.0","method":"close","id":{}}`, CodeInvalidRequest, ""},
		"array params":               {`{"jsonrpc":"2.0","method":"exec","params":[1],"id":6}`, CodeInvalidParams, "6"},
	} {
		req, err := DecodeRequest([]byte(tc.line))
		code := 0
		if err != nil {
			code = err.Code
		}
		if code != tc.code {
			t.Errorf("%s: DecodeRequest(%s) code = %d, want %d (%v)", name, tc.line, code, tc.code, err)
		}
		id := ""
		if req != nil && req.ID != nil {
			id = string(req.ID)
		}
		if id != tc.id {
			t.Errorf("%s: id = %q, want %q", name, id, tc.id)
		}
	}
}

func TestReadLinesBoundsLength(t *testing.T) {
	in := "short\n" + strings.Repeat("x", 100) + "\n\nlast"
	out := make(chan lineOrErr, 10)
	readLines(context.Background(), bufio.NewReaderSize(strings.NewReader(in), 16), 50, out)
	var got []string
	for l := range out {
		switch {
		case l.err != nil:
			got = append(got, "EOF")
			close(out)
		case l.tooLong:
			got = append(got, "TOO LONG")
		default:
			got = append(got, strings.TrimSpace(string(l.line)))
		}
	}
	if s := strings.Join(got, ","); s != "short,TOO LONG,last,EOF" {
		t.Fatalf("readLines = %s", s)
	}
}

// FuzzDecodeRequest: no input panics the decoder, and what it accepts has a
// method and an id that is valid JSON to answer with.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"exec","params":{"command":"echo"},"id":1}`,
		`{"jsonrpc":"2.0","method":"create","params":{"vfs":{"mounts":{"/w":{"type":"memory"}}}},"id":"x"}`,
		`{"jsonrpc":"2.0","method":"close"}`,
		`[1]`, `null`, `{"id":[]}`, `{"jsonrpc":"2.0","method":"","id":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeRequest(b)
		if err == nil {
			if req.Method == "" {
				t.Fatalf("accepted %q without a method", b)
			}
		}
		if req != nil && req.ID != nil && !json.Valid(req.ID) {
			t.Fatalf("id %q is not JSON", req.ID)
		}
	})
}

// TestShutdownDoesNotWaitForAReaderThatStopped: a client that closes its
// end of input and never reads replies cannot keep the server alive.
func TestShutdownDoesNotWaitForAReaderThatStopped(t *testing.T) {
	pr, pw := io.Pipe() // never read
	defer pr.Close()
	var lines strings.Builder
	for i := range 2000 { // far more than the queue holds
		fmt.Fprintf(&lines, `{"jsonrpc":"2.0","method":"nope","id":%d}`+"\n", i)
	}
	lines.WriteString(`{"jsonrpc":"2.0","method":"close","id":"end"}` + "\n")
	done := make(chan error, 1)
	go func() {
		done <- Serve(context.Background(), strings.NewReader(lines.String()), pw, Options{WriteStall: time.Second})
	}()
	select {
	case <-done:
	case <-time.After(3*drainTimeout + 10*time.Second):
		t.Fatal("Serve did not return")
	}
}

// TestCreateRefusesAnUnknownKey: a misspelt setting, at the top or nested,
// is -32602 naming it and nothing is created; the same config spelt right
// reaches Create (the positive control).
func TestCreateRefusesAnUnknownKey(t *testing.T) {
	for name, tc := range map[string]struct {
		params  string
		key     string // "" when create must go through
		created bool
	}{
		"a misspelt top-level key":    {`{"imagee":"standard"}`, `"imagee"`, false},
		"a misspelt nested key":       {`{"network":{"allowed_host":["example.com"]}}`, `"allowed_host"`, false},
		"a key of another method":     {`{"command":"true"}`, `"command"`, false},
		"the same config spelt right": {`{"image":"standard","network":{"allowed_hosts":["example.com"]}}`, "", true},
	} {
		created := false
		create := func(context.Context, *sandbox.Config) (*sandbox.Sandbox, error) {
			created = true
			return nil, &sandbox.Error{Kind: sandbox.KindStart, Message: "not in this test"}
		}
		var out strings.Builder
		in := `{"jsonrpc":"2.0","method":"create","params":` + tc.params + `,"id":1}` + "\n"
		if err := Serve(context.Background(), strings.NewReader(in), &out, Options{Create: create}); err != nil {
			t.Fatalf("%s: Serve: %v", name, err)
		}
		var r struct {
			Error *Error `json:"error"`
		}
		json.Unmarshal([]byte(out.String()), &r)
		if created != tc.created {
			t.Errorf("%s: created = %v, want %v", name, created, tc.created)
		}
		if tc.key == "" {
			continue
		}
		if r.Error == nil || r.Error.Code != CodeInvalidParams || !strings.Contains(r.Error.Message, "unknown key "+tc.key) {
			t.Errorf("%s: reply %s, want -32602 naming %s", name, out.String(), tc.key)
		}
	}
}

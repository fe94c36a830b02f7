package secrets

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Values the fake sources hand out; no error or printout may ever contain one.
var fakeValues = []string{
	"tok-REAL-1234567890", "other-REAL-abcdef", "file-REAL-0987654321", "cmd-REAL-55555",
	"partial-REAL-output", "Q7#",
}

func fakeSources(t *testing.T) Sources {
	env := map[string]string{"TOKEN": "tok-REAL-1234567890", "OTHER": "other-REAL-abcdef", "EMPTY": "", "SHORT": "Q7#"}
	files := map[string][]byte{"/run/key": []byte("file-REAL-0987654321\n"), "/run/blank": []byte("\r\n\n")}
	return Sources{
		LookupEnv: func(n string) (string, bool) { v, ok := env[n]; return v, ok },
		ReadFile: func(p string) ([]byte, error) {
			if b, ok := files[p]; ok {
				return bytes.Clone(b), nil
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		},
		RunCmd: func(c string) ([]byte, error) {
			if c == "pass show x@y" {
				return []byte("cmd-REAL-55555\r\n"), nil
			}
			// A failing command may print something; it must not reach the error.
			return []byte("partial-REAL-output"), errors.New("exit status 1")
		},
	}
}

func assertNoValue(t *testing.T, what, s string) {
	t.Helper()
	for _, v := range fakeValues {
		if strings.Contains(s, v) {
			t.Fatalf("%s reveals a value: %q", what, s)
		}
	}
}

func TestParseFlag(t *testing.T) {
	tests := []struct {
		name   string
		flag   string
		secret string
		hosts  []string
		value  string
		body   bool
		prefix string
	}{
		{"an env var named like the secret is read", "TOKEN@api.x.com", "TOKEN", []string{"api.x.com"}, "tok-REAL-1234567890", false, ""},
		{"hosts are normalised and deduplicated", "TOKEN@API.x.com.,*.Example.COM,api.x.com", "TOKEN", []string{"api.x.com", "*.example.com"}, "tok-REAL-1234567890", false, ""},
		{"env:VAR reads another variable", "GH=env:OTHER@api.github.com", "GH", []string{"api.github.com"}, "other-REAL-abcdef", false, ""},
		{"file: drops trailing newlines", "KEY=file:/run/key@x.com", "KEY", []string{"x.com"}, "file-REAL-0987654321", false, ""},
		{"cmd: may contain @ because hosts follow the last one", "KEY=cmd:pass show x@y@api.x.com", "KEY", []string{"api.x.com"}, "cmd-REAL-55555", false, ""},
		{":body opts in to body swapping", "TOKEN@api.x.com:body", "TOKEN", []string{"api.x.com"}, "tok-REAL-1234567890", true, ""},
		{":prefix= starts the placeholder", "TOKEN@api.x.com:prefix=sk-ant-api03-:body", "TOKEN", []string{"api.x.com"}, "tok-REAL-1234567890", true, "sk-ant-api03-"},
		{"addresses are hosts, IPv6 in brackets", "TOKEN@[::1],10.0.0.1,[::ffff:10.0.0.2]", "TOKEN", []string{"::1", "10.0.0.1", "10.0.0.2"}, "tok-REAL-1234567890", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseFlag(tt.flag, fakeSources(t))
			if err != nil {
				t.Fatalf("ParseFlag(%q): %v", tt.flag, err)
			}
			if s.Name != tt.secret || !slices.Equal(s.Hosts, tt.hosts) || string(s.val()) != tt.value || s.InBody != tt.body {
				t.Fatalf("got %v (value ok: %t), want %s@%v body=%t", s, string(s.val()) == tt.value, tt.secret, tt.hosts, tt.body)
			}
			if !strings.HasPrefix(s.Placeholder, tt.prefix+Marker) || len(s.Placeholder) != len(tt.prefix)+len(Marker)+randomChars {
				t.Fatalf("placeholder %q does not start with %q or has the wrong length", s.Placeholder, tt.prefix+Marker)
			}
		})
	}
}

func TestParseFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		flag string
		want string
	}{
		{"no @ says how to write the flag", "TOKEN", `missing "@HOST"`},
		{"nothing after @ asks for hosts", "TOKEN@", "no hosts after '@'"},
		{"only options after @ asks for hosts", "TOKEN@:body", "no hosts after '@'"},
		{"an empty host in the list is refused", "TOKEN@a.com,,b.com", "empty host"},
		{"a name starting with a digit is refused", "1TOKEN@x.com", "not an environment variable name"},
		{"no name is refused", "@x.com", "no NAME"},
		{"a literal value as the name is refused and not echoed", "sk-live-abc@x.com", "not an environment variable name"},
		{"a literal value after = is refused and not echoed", "TOKEN=sk-live-xyz@x.com", "a literal value is not accepted"},
		{"a missing file says so", "KEY=file:/nope@x.com", "reading the file: open /nope"},
		{"a failing command says so without its output", "KEY=cmd:false@x.com", "running the command: exit status 1"},
		{"an unset env var says how to provide it", "NOPE@x.com", "env var NOPE is not set on the host"},
		{"an empty env var is refused", "EMPTY@x.com", "the value from env var EMPTY is empty"},
		{"a file of only newlines is empty", "KEY=file:/run/blank@x.com", "the value from file:/run/blank is empty"},
		{"a value shorter than 4 bytes is refused", "SHORT@x.com", "shorter than 4 bytes"},
		{"an empty file: source is refused", "KEY=file:@x.com", "empty file: source"},
		{"env: needs a variable name", "KEY=env:1X@x.com", "env: not an environment variable name"},
		{"a port is refused: secrets bind to hosts", "TOKEN@x.com:443", "not ports"},
		{"a port inside the host list is refused", "TOKEN@x.com:443,y.com", "unknown option"},
		{"an unknown option is named", "TOKEN@x.com:bdy", `unknown option "bdy"`},
		{"a URL is refused", "TOKEN@https://x.com/v1", "a URL after '@'"},
		{"a wildcard over a top-level domain is refused", "TOKEN@*.com", "every host under a top-level domain"},
		{"a wildcard over a public suffix is refused", "TOKEN@*.workers.dev", "every host under a public suffix"},
		{"a wildcard over an ICANN second-level suffix is refused", "TOKEN@*.co.uk", "every host under a public suffix"},
		{"a wildcard inside a name is refused", "TOKEN@a.*.com", "whole leading label"},
		{"a path is refused", "TOKEN@x.com/v1", "a path"},
		{"a numeric last label is refused", "TOKEN@127.1", "numeric last label"},
		{"a bad prefix is refused", "TOKEN@x.com:prefix=a/b", "placeholder prefix may hold only"},
		{"an empty prefix is refused", "TOKEN@x.com:prefix=", "empty :prefix="},
		{"a zoned address is refused", "TOKEN@[fe80::1%eth0]", "zoned"},
		{"an IPv6 address without brackets says to add them", "TOKEN@fe80::1", "in brackets"},
		{"an empty option is refused", "TOKEN@x.com::body", "an empty option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseFlag(tt.flag, fakeSources(t))
			if err == nil {
				t.Fatalf("ParseFlag(%q) = %v, want an error containing %q", tt.flag, s, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseFlag(%q) error %q does not contain %q", tt.flag, err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "--secret") {
				t.Fatalf("error %q does not name the flag", err)
			}
			assertNoValue(t, "error", err.Error())
			for _, lit := range []string{"sk-live-abc", "sk-live-xyz"} {
				if strings.Contains(err.Error(), lit) {
					t.Fatalf("error %q echoes the literal %q", err, lit)
				}
			}
		})
	}
}

func TestParseFlagChecksEverythingBeforeRunningTheCommand(t *testing.T) {
	src := fakeSources(t)
	src.RunCmd = func(string) ([]byte, error) { t.Fatal("the command ran despite a bad flag"); return nil, nil }
	for _, f := range []string{"KEY=cmd:x@bad host", "KEY=cmd:x@x.com:nope", "KEY=cmd:x@", "KEY=cmd:x@*.com"} {
		if _, err := ParseFlag(f, src); err == nil {
			t.Fatalf("ParseFlag(%q) succeeded", f)
		}
	}
}

func TestParseFlagWithNilSourcesFailsCleanly(t *testing.T) {
	for _, f := range []string{"TOKEN@x.com", "K=file:/a@x.com", "K=cmd:a@x.com"} {
		if _, err := ParseFlag(f, Sources{}); err == nil || !strings.Contains(err.Error(), "is nil") {
			t.Fatalf("ParseFlag(%q, Sources{}) error = %v", f, err)
		}
	}
}

func TestDefaultSourcesReadTheRealEnvironmentFilesAndCommands(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AIRLOCK_TEST_SECRET", "env-test-value-1")
	if err := os.WriteFile(filepath.Join(home, "key"), []byte("file-test-value-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{
		"AIRLOCK_TEST_SECRET@x.com":               "env-test-value-1",
		"K=file:~/key@x.com":                      "file-test-value-2",
		"K=cmd:printf 'cmd-test-value-3\n'@x.com": "cmd-test-value-3",
	} {
		s, err := ParseFlag(flag, DefaultSources())
		if err != nil {
			t.Fatalf("ParseFlag(%q): %v", flag, err)
		}
		if string(s.val()) != want {
			t.Fatalf("ParseFlag(%q) read the wrong value", flag)
		}
	}
	if _, err := ParseFlag("K=cmd:echo leaked-output; exit 3@x.com", DefaultSources()); err == nil ||
		!strings.Contains(err.Error(), "exit status 3") || strings.Contains(err.Error(), "leaked-output") {
		t.Fatalf("failing command: error = %v", err)
	}
}

// A FIFO where a secret's file is looked for fails at once.
func TestSecretFileFIFODoesNotBlock(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "token")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := DefaultSources().ReadFile(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ReadFile(FIFO) = %v, want refused", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile blocked on a FIFO")
	}
}

package sandbox

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// The sandbox re-executes this test binary as its guest.
func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

func newSandbox(t *testing.T, c *Config) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := Create(context.Background(), c)
	if err != nil {
		if ctx.Err() == nil && strings.Contains(err.Error(), "create namespaces") {
			t.Skipf("no user namespaces here: %v", err)
		}
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { sb.Close() })
	return sb
}

func TestExecAndFiles(t *testing.T) {
	var files []FileEvent
	done := make(chan struct{})
	sb := newSandbox(t, &Config{Env: map[string]string{"GREETING": "hi"}})
	go func() {
		defer close(done)
		for e := range sb.Events() {
			if e.File != nil {
				files = append(files, *e.File)
			}
		}
	}()
	ctx := context.Background()
	r, err := sb.Exec("echo $GREETING; pwd; echo err >&2; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 3 || r.Stdout != "hi\n/workspace\n" || r.Stderr != "err\n" {
		t.Fatalf("Exec = %+v", r)
	}
	if err := sb.WriteFileContext(ctx, "/workspace/sub/hello.txt", []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := sb.ReadFileContext(ctx, "sub/hello.txt")
	if err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	ls, err := sb.ListFilesContext(ctx, "/workspace/sub")
	if err != nil || len(ls) != 1 || ls[0].Name != "hello.txt" || ls[0].Mode != 0o600 || ls[0].Size != 5 {
		t.Fatalf("ListFiles = %+v, %v", ls, err)
	}
	if _, err := sb.ReadFileContext(ctx, "/workspace/nope"); !errors.Is(err, &Error{Kind: KindNotFound}) {
		t.Fatalf("ReadFile(missing) = %v, want kind %s", err, KindNotFound)
	}
	if err := sb.WriteFile("/etc/passwd", []byte("x")); !errors.Is(err, &Error{Kind: KindPermission}) {
		t.Fatalf("WriteFile(/etc/passwd) = %v, want kind %s", err, KindPermission)
	}
	if _, err := sb.Exec("rm sub/hello.txt"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	sb.Close()
	<-done
	var ops []string
	for _, f := range files {
		ops = append(ops, f.Op+" "+f.Path)
	}
	got := strings.Join(ops, "\n")
	for _, want := range []string{"create /workspace/sub", "write /workspace/sub/hello.txt", "delete /workspace/sub/hello.txt"} {
		if !strings.Contains(got, want) {
			t.Errorf("file events lack %q; got:\n%s", want, got)
		}
	}
	if _, err := sb.Exec("true"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec after Close = %v, want ErrClosed", err)
	}
}

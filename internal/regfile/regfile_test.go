package regfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadTakesOnlyABoundedRegularFile(t *testing.T) {
	d := t.TempDir()
	file, fifo, link := filepath.Join(d, "f"), filepath.Join(d, "fifo"), filepath.Join(d, "link")
	os.WriteFile(file, []byte("hello"), 0o600)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Symlink(file, link)

	if b, err := Read(file, 5, false); err != nil || string(b) != "hello" {
		t.Errorf("Read(file) = %q, %v", b, err)
	}
	if b, err := Read(link, 5, true); err != nil || string(b) != "hello" {
		t.Errorf("Read(link, follow) = %q, %v", b, err)
	}
	if _, err := Read(link, 5, false); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Read(link, no follow) = %v, want ErrNotRegular", err)
	}
	if _, err := Read(file, 4, false); err == nil || !strings.Contains(err.Error(), "larger than 4 bytes") {
		t.Errorf("Read over the bound = %v", err)
	}
	for _, p := range []string{d, "/dev/zero"} {
		if _, err := Read(p, 5, true); !errors.Is(err, ErrNotRegular) {
			t.Errorf("Read(%s) = %v, want ErrNotRegular", p, err)
		}
	}
	done := make(chan error, 1)
	go func() { _, err := Read(fifo, 5, true); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a FIFO") {
			t.Errorf("Read(fifo) = %v, want a FIFO refused", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read blocked on a FIFO")
	}
}

package guestbin

import (
	"bytes"
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const regenerate = "run go generate ./internal/guestbin"

// builtIn skips a test of the embedded guest in a build that holds none (a
// fresh clone's `go test ./...`: the guest is generated, and .ci/run
// generates it first) and fails one whose guest this machine cannot run.
func builtIn(t *testing.T) {
	t.Helper()
	if ID() == "" {
		t.Skip("no lean guest is built in: " + regenerate)
	}
	if m := Missing(); m != "" {
		t.Fatal(m + ": " + regenerate)
	}
}

// The airlock binary the tests and users build must hold the guest of the
// sources as they are: a guest built from older ones would run as every
// native sandbox's PID 1 unseen.
func TestTheEmbeddedGuestIsBuiltFromTheSourcesAsTheyAre(t *testing.T) {
	builtIn(t)
	out, err := exec.Command("go", "run", "./gen", "-id").Output()
	if err != nil {
		t.Fatalf("go run ./gen -id: %v", err)
	}
	if now := strings.TrimSpace(string(out)); now != ID() {
		t.Fatalf("the embedded lean guest is stale (built from %s, the sources are now %s): %s", ID(), now, regenerate)
	}
}

func TestTheEmbeddedGuestIsAStaticExecutableForThisMachine(t *testing.T) {
	builtIn(t)
	b, err := bin.ReadFile(guest.File)
	if err != nil {
		t.Fatal("no lean guest is built in: " + regenerate)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the lean guest is not ELF: %v", err)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "riscv64": elf.EM_RISCV}[runtime.GOARCH]
	if want != 0 && f.Machine != want {
		t.Errorf("the lean guest is for %v, not %v", f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the lean guest is dynamically linked: gen must build it with CGO_ENABLED=0")
		}
	}
}

// The guest is lean only while none of the host side's packages (nor the VM
// guest's FUSE server) creeps into it through an import.
func TestTheLeanGuestHoldsNoneOfTheHostSide(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "airlock_native_guest", "./lean").Output() // gen's tags
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, host := range []string{"gvisor.dev/", "github.com/hanwen/go-fuse/", "github.com/airlock-dev/airlock/internal/vfs", "github.com/spf13/cobra", "github.com/docker/", "github.com/modelcontextprotocol/",
			"github.com/airlock-dev/airlock/internal/engine", "github.com/airlock-dev/airlock/internal/backend", "github.com/airlock-dev/airlock/internal/gateway"} {
			if strings.HasPrefix(pkg, host) {
				t.Errorf("the lean guest imports %s", pkg)
			}
		}
	}
}

func TestOpenCachesTheGuestOnceReadOnlyAndExecutable(t *testing.T) {
	builtIn(t)
	dir := filepath.Join(t.TempDir(), "guest")
	f := mustOpen(t, dir)
	if int(f.Fd()) < MinFD {
		t.Errorf("descriptor %d is below MinFD %d", f.Fd(), MinFD)
	}
	if flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor flags %#x (%v): not close-on-exec", flags, err)
	}
	fi, err := os.Stat(CachePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o555 {
		t.Errorf("cached guest mode %v, want 0555", fi.Mode())
	}
	if d, err := os.Stat(dir); err != nil || d.Mode().Perm() != 0o700 {
		t.Errorf("cache dir mode %v (%v), want 0700", d.Mode(), err)
	}
	again := mustOpen(t, dir)
	if !sameFile(t, f, again) {
		t.Error("a second Open wrote the guest again")
	}
	// It runs as the guest: without a control socket it says so.
	cmd := exec.Command(Path(f), "guest")
	cmd.Args[0] = "airlock"
	cmd.ExtraFiles = []*os.File{nil}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "airlock guest:") {
		t.Fatalf("running the cached guest: %v, %q", err, out)
	}
	// Run by hand, with no arguments at all, it says so too and exits 1 (it
	// panicked: exit 2).
	out, err = exec.Command(Path(f)).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "airlock guest: no control socket") {
		t.Fatalf("running the cached guest without arguments: %v, %q; want exit status 1 and its message", err, out)
	}
}

func TestOpenReplacesAFileThatIsNotTheGuestAsWritten(t *testing.T) {
	builtIn(t)
	fi, err := fs.Stat(bin, guest.File)
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	for name, plant := range map[string]func(p string) error{
		"too short":      func(p string) error { return os.WriteFile(p, []byte("#!/bin/sh\n"), 0o555) },
		"writable":       func(p string) error { return os.WriteFile(p, make([]byte, size), 0o755) },
		"a symlink":      func(p string) error { return os.Symlink("/bin/true", p) },
		"setuid":         func(p string) error { return writeMode(p, size, os.ModeSetuid|0o555) },
		"group-writable": func(p string) error { return writeMode(p, size, 0o575) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Dir(CachePath(dir)), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := plant(CachePath(dir)); err != nil {
				t.Fatal(err)
			}
			f := mustOpen(t, dir)
			want, err := bin.ReadFile(guest.File)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(Path(f))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the guest opened is not the embedded one (%d bytes, %v)", len(got), err)
			}
		})
	}
}

func writeMode(p string, size int64, mode os.FileMode) error {
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

func mustOpen(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func sameFile(t *testing.T, a, b *os.File) bool {
	t.Helper()
	sa, err1 := a.Stat()
	sb, err2 := b.Stat()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return os.SameFile(sa, sb)
}

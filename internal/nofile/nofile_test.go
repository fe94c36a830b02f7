package nofile_test

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/internal/nofile"
)

const childEnv = "AIRLOCK_NOFILE_TEST_SOFT"

func TestSoftIsTheLimitFromBeforeTheRuntimeRaisedIt(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("read on amd64 only")
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if want := os.Getenv(childEnv); want != "" {
		// The child: started with want as its soft limit, raised since.
		if got := strconv.FormatUint(nofile.Soft, 10); got != want || nofile.Hard != now.Max || now.Cur != now.Max-1 {
			t.Fatalf("started with %s/%d, now %d/%d; want %s at start and the hard limit less 1 now", got, nofile.Hard, now.Cur, now.Max, want)
		}
		return
	}
	if now.Max < 100 {
		t.Skipf("hard limit %d: too low to lower", now.Max)
	}
	// Setrlimit makes os/exec start the child with this limit as it is.
	low := syscall.Rlimit{Cur: 64, Max: now.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &now)
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

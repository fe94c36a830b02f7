package timerslack

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRelaxSetsTheCallingThreadsSlack(t *testing.T) {
	runtime.LockOSThread() // the thread ends with the test: its slack goes with it
	Relax()
	got, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got != Relaxed {
		t.Errorf("timer slack %d ns after Relax, want %d", got, Relaxed)
	}
}

// Command execlat measures the exec round trip into a running sandbox from a
// long-lived client: connect once, then N times run /bin/true over the
// control socket and wait for its exit. This is the latency an agent harness
// sees; `airlock exec` adds one process start (Go's ~1.5 ms here) on top.
//
// Beside it, in turn with it so drift falls on both alike, this process
// starts the same command itself (fork, exec and wait, with /dev/null for
// its stdio, as the guest starts it): the part of a round trip that is the
// command's own, which no sandbox can take below. It prints both, and what
// airlock adds, on two lines.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/term"
)

const warmup = 50

func main() {
	n := flag.Int("n", 1000, "round trips")
	flag.Parse()
	if flag.NArg() != 1 || *n < 1 {
		fmt.Fprintln(os.Stderr, "usage: execlat [-n N] SANDBOX")
		os.Exit(2)
	}
	root, err := state.Root()
	check(err)
	store, err := state.Open(root)
	check(err)
	e, err := store.Resolve(flag.Arg(0))
	check(err)
	cl, err := control.Dial(e.SocketPath())
	check(err)
	defer cl.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	check(err)
	io := term.IO{Stdin: null, Stdout: null, Stderr: null}
	argv := []string{"/bin/true"}
	attr := &syscall.ProcAttr{Files: []uintptr{null.Fd(), null.Fd(), null.Fd()}}
	// Signals are caught once, as a harness running many commands would.
	sigs, stop := control.Signals()
	defer stop()
	lat := make([]time.Duration, 0, *n)
	direct := make([]time.Duration, 0, *n)
	for i := 0; i < *n+warmup; i++ {
		t0 := time.Now()
		code, err := cl.Exec(&proto.Exec{Argv: argv}, io, sigs)
		if err != nil || code != 0 {
			fmt.Fprintf(os.Stderr, "execlat: exec: code %d, %v\n", code, err)
			os.Exit(1)
		}
		t1 := time.Now()
		pid, err := syscall.ForkExec(argv[0], argv, attr)
		check(err)
		var ws syscall.WaitStatus
		for {
			if _, err = syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		check(err)
		if !ws.Exited() || ws.ExitStatus() != 0 {
			fmt.Fprintf(os.Stderr, "execlat: %s run directly: %v\n", argv[0], ws)
			os.Exit(1)
		}
		if i >= warmup {
			lat = append(lat, t1.Sub(t0))
			direct = append(direct, time.Since(t1))
		}
	}
	slices.Sort(lat)
	slices.Sort(direct)
	p50, p99, d50 := pct(lat, 0.5), pct(lat, 0.99), pct(direct, 0.5)
	fmt.Printf("exec round trip over the control socket (%d runs): p50 %.2f ms, p99 %.2f ms\n", len(lat), p50, p99)
	fmt.Printf("     %s started by this process: p50 %.2f ms; airlock adds %.2f ms\n", argv[0], d50, p50-d50)
}

func pct(d []time.Duration, p float64) float64 {
	return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "execlat:", err)
		os.Exit(1)
	}
}

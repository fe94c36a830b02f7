// Command execlat measures the exec round trip into a running sandbox from a
// long-lived client: connect once, then N times run /bin/true over the
// control socket and wait for its exit. This is the latency an agent harness
// sees; `airlock exec` adds one process start (Go's ~1.5 ms here) on top.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/term"
)

func main() {
	n := flag.Int("n", 1000, "round trips")
	flag.Parse()
	if flag.NArg() != 1 {
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
	// Signals are caught once, as a harness running many commands would.
	sigs, stop := control.Signals()
	defer stop()
	lat := make([]time.Duration, 0, *n)
	for i := 0; i < *n+50; i++ {
		t0 := time.Now()
		code, err := cl.Exec(&proto.Exec{Argv: []string{"/bin/true"}}, io, sigs)
		if err != nil || code != 0 {
			fmt.Fprintf(os.Stderr, "execlat: exec: code %d, %v\n", code, err)
			os.Exit(1)
		}
		if i >= 50 { // warm-up
			lat = append(lat, time.Since(t0))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	fmt.Printf("exec round trip over the control socket (%d runs): p50 %.2f ms, p99 %.2f ms\n", len(lat), pct(0.5), pct(0.99))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "execlat:", err)
		os.Exit(1)
	}
}

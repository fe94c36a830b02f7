// Command apibench measures the programmatic API from a long-lived client:
// the exec round trip of /bin/true (no shell) and write_file+read_file pairs
// of 4 KiB, through `airlock rpc` (package sandbox/client) and through the
// embedded API (package sandbox, no subprocess). bench/api.sh runs it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/sandbox/client"
)

func main() {
	sandbox.Init() // the embedded sandboxes re-execute this program as their guest
	n := flag.Int("n", 1000, "exec round trips")
	files := flag.Int("files", 1000, "write_file+read_file pairs")
	bin := flag.String("airlock", "airlock", "airlock binary for the rpc runs")
	flag.Parse()
	ctx := context.Background()

	emb, err := sandbox.Create(ctx, &sandbox.Config{})
	check(err)
	run("embedded", emb, *n, *files)
	emb.Close()

	rpc, err := client.New(ctx, &sandbox.Config{}, client.Options{Binary: *bin})
	check(err)
	run("rpc", rpc, *n, *files)
	rpc.Close()
}

func run(label string, sb sandbox.API, n, files int) {
	ctx := context.Background()
	req := sandbox.ExecRequest{Args: []string{"/bin/true"}}
	for range 50 { // warm up
		_, err := sb.ExecContext(ctx, req)
		check(err)
	}
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		r, err := sb.ExecContext(ctx, req)
		check(err)
		if r.ExitCode != 0 {
			check(fmt.Errorf("/bin/true exited %d", r.ExitCode))
		}
		lat = append(lat, time.Since(t0))
	}
	report(label+" exec /bin/true", lat)

	data := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	pairs := make([]time.Duration, 0, files)
	start := time.Now()
	for i := range files {
		t0 := time.Now()
		p := fmt.Sprintf("/workspace/f%d", i%100)
		check(sb.WriteFileContext(ctx, p, data, 0o644))
		got, err := sb.ReadFileContext(ctx, p)
		check(err)
		if !bytes.Equal(got, data) {
			check(fmt.Errorf("read back %d bytes, not what was written", len(got)))
		}
		pairs = append(pairs, time.Since(t0))
	}
	total := time.Since(start)
	report(label+" write+read 4 KiB", pairs)
	fmt.Printf("%-28s total %d pairs: %.1f ms\n", label+" write+read 4 KiB", files, ms(total))
}

func report(label string, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(float64(len(lat))*p))] }
	fmt.Printf("%-28s n=%d  p50 %.3f ms  p99 %.3f ms  mean %.3f ms  max %.3f ms\n", label, len(lat),
		ms(pct(0.50)), ms(pct(0.99)), ms(sum/time.Duration(len(lat))), ms(lat[len(lat)-1]))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "apibench:", err)
		os.Exit(1)
	}
}

// Command alternate times whole commands side by side, one run of each in
// turn (A B C, B C A, C A B, ...), so a machine whose speed drifts during
// the measurement (other load, caches, a growing state dir) drifts for
// every command alike. hyperfine runs each command's runs as one block,
// which made two builds of airlock differ by more than the effect measured.
//
//	alternate -n 100 -warmup 10 'airlock run=airlock run -q -- /bin/true' 'bwrap=bwrap ...'
//
// Each argument is NAME=COMMAND, the command split on spaces (no shell).
// It prints one row per command: name, mean, median, p10, p90 (ms), and the
// median of the per-round ratios to the first command.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

type command struct {
	name  string
	argv  []string
	times []float64 // ms, in round order
}

func main() {
	runs := flag.Int("n", 100, "counted runs of each command")
	warmup := flag.Int("warmup", 10, "uncounted runs of each command first")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: alternate [-n RUNS] [-warmup N] NAME=COMMAND...")
		os.Exit(2)
	}
	var cmds []*command
	for _, a := range flag.Args() {
		name, line, ok := strings.Cut(a, "=")
		argv := strings.Fields(line)
		if !ok || name == "" || len(argv) == 0 {
			fmt.Fprintf(os.Stderr, "alternate: %q is not NAME=COMMAND\n", a)
			os.Exit(2)
		}
		cmds = append(cmds, &command{name: name, argv: argv})
	}
	for round := 0; round < *warmup+*runs; round++ {
		for i := range cmds {
			c := cmds[(round+i)%len(cmds)] // rotate who goes first
			ms, err := timeOne(c.argv)
			if err != nil {
				fmt.Fprintf(os.Stderr, "alternate: %s: %v\n", c.name, err)
				os.Exit(1)
			}
			if round >= *warmup {
				c.times = append(c.times, ms)
			}
		}
	}
	for _, c := range cmds {
		ratios := make([]float64, len(c.times))
		for i, t := range c.times {
			ratios[i] = t / cmds[0].times[i]
		}
		s := slices.Sorted(slices.Values(c.times))
		fmt.Printf("%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", c.name, mean(s), pct(s, 50), pct(s, 10), pct(s, 90),
			pct(slices.Sorted(slices.Values(ratios)), 50))
	}
}

// timeOne runs argv to its end with no input or output and returns its wall time.
func timeOne(argv []string) (float64, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	return float64(d.Microseconds()) / 1000, nil
}

func mean(s []float64) float64 {
	var sum float64
	for _, v := range s {
		sum += v
	}
	return sum / float64(len(s))
}

// pct is the p-th percentile of sorted s (nearest rank).
func pct(s []float64, p int) float64 {
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

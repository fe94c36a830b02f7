// Command alternate times whole commands side by side, one run of each in
// turn (A B C, B C A, C A B, ...), so a machine whose speed drifts during
// the measurement (other load, caches, a growing state dir) drifts for
// every command alike. hyperfine runs each command's runs as one block,
// which made two builds of airlock differ by more than the effect measured.
//
//	alternate -n 100 -warmup 10 'airlock run=airlock run -q -- /bin/true' 'bwrap=bwrap ...'
//	alternate -n 30 -gap 200ms ...   # runs 0.2 s apart, as a harness makes them
//
// Each argument is NAME=COMMAND, the command split on spaces (no shell).
// Its leading VAR=VALUE words are added to its environment, as a shell
// would: no env(1) is run, whose exec would be timed too.
// Every executable named by an absolute path in a command (the binary timed,
// and one run through setpriv or env alike) first has its page cache
// dropped and read back in one sequential pass: how a file's pages came
// into the cache (written by the Go linker through mmap, by cp, faulted in
// by earlier runs) changed a start by up to 18%, so every binary starts
// from the same state.
// It prints one row per command: name, mean, median, p10, p90 (ms), and the
// median of the per-round ratios to the first command.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

type command struct {
	name  string
	env   []string // VAR=VALUE added to this process's environment
	argv  []string
	times []float64 // ms, in round order
}

func main() {
	runs := flag.Int("n", 100, "counted runs of each command")
	warmup := flag.Int("warmup", 10, "uncounted runs of each command first")
	gap := flag.Duration("gap", 0, "an idle pause before each run, untimed: how a harness that runs one command now and then finds the machine (idle CPUs, RCU grace periods that nothing shortens)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: alternate [-n RUNS] [-warmup N] [-gap DURATION] NAME=COMMAND...")
		os.Exit(2)
	}
	var cmds []*command
	for _, a := range flag.Args() {
		name, line, ok := strings.Cut(a, "=")
		argv := strings.Fields(line)
		n := 0
		for n < len(argv) && strings.Contains(argv[n], "=") {
			n++
		}
		if !ok || name == "" || len(argv) == n {
			fmt.Fprintf(os.Stderr, "alternate: %q is not NAME=[VAR=VALUE...] COMMAND\n", a)
			os.Exit(2)
		}
		cmds = append(cmds, &command{name: name, env: argv[:n], argv: argv[n:]})
	}
	settled := map[string]bool{}
	for _, c := range cmds {
		for _, w := range c.argv {
			if filepath.IsAbs(w) && !settled[w] {
				settled[w] = true
				if err := settle(w); err != nil {
					fmt.Fprintf(os.Stderr, "alternate: %v\n", err)
					os.Exit(1)
				}
			}
		}
	}
	for round := 0; round < *warmup+*runs; round++ {
		for i := range cmds {
			c := cmds[(round+i)%len(cmds)] // rotate who goes first
			time.Sleep(*gap)
			ms, err := timeOne(c.env, c.argv)
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

// settle drops path's pages from the page cache and reads them back in
// one sequential pass, if it is an executable regular file.
func settle(path string) error {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return nil // an argument, not a program
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Written back first: the drop leaves dirty pages (a copy made just
	// before, as startup.sh makes) where they are.
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("write %s back: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop %s from the page cache: %w", path, err)
	}
	if n := resident(f, fi.Size()); n > 0 {
		// A running process maps it (a sandbox's supervisor started from
		// the binary timed): its pages stay as they came in, and a start
		// from it compared 10-15% slower than one from a fresh copy.
		fmt.Fprintf(os.Stderr, "alternate: %s: %d pages stay cached (a running process maps it): time a copy no process runs\n", path, n)
	}
	_, err = io.Copy(io.Discard, f)
	return err
}

// resident counts f's pages in the page cache (0 where it cannot tell).
func resident(f *os.File, size int64) int {
	if size == 0 {
		return 0
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0
	}
	defer unix.Munmap(m)
	vec := make([]byte, (int(size)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// timeOne runs argv, with env added to its environment, to its end with no
// input or output and returns its wall time.
func timeOne(env, argv []string) (float64, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
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

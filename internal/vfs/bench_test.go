package vfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Workloads shared by the benchmarks and the side-by-side report.
var workloads = []struct {
	name string
	run  func(dir string) error
}{
	{"small files: write 500 x 4 KiB", func(dir string) error {
		buf := make([]byte, 4096)
		for i := range 500 {
			if err := os.WriteFile(fmt.Sprintf("%s/s%03d", dir, i), buf, 0o644); err != nil {
				return err
			}
		}
		return nil
	}},
	{"small files: read 500 x 4 KiB", func(dir string) error {
		for i := range 500 {
			if _, err := os.ReadFile(fmt.Sprintf("%s/s%03d", dir, i)); err != nil {
				return err
			}
		}
		return nil
	}},
	{"storm: create 2,000 files in 200 nested dirs", func(dir string) error {
		return storm(dir, func(p string, file bool) error {
			if !file {
				return os.Mkdir(p, 0o755)
			}
			return os.WriteFile(p, []byte("{}"), 0o644)
		})
	}},
	{"storm: stat them", func(dir string) error {
		return storm(dir, func(p string, file bool) error { _, err := os.Lstat(p); return err })
	}},
	{"storm: remove them", func(dir string) error {
		return os.RemoveAll(filepath.Join(dir, "node_modules"))
	}},
}

// storm visits node_modules/pNN/subM/fileK.json: 20 x 10 dirs, 10 files each.
func storm(dir string, f func(p string, file bool) error) error {
	root := filepath.Join(dir, "node_modules")
	if err := f(root, false); err != nil && !os.IsExist(err) {
		return err
	}
	for i := range 20 {
		pkg := fmt.Sprintf("%s/p%02d", root, i)
		if err := f(pkg, false); err != nil {
			return err
		}
		for j := range 10 {
			sub := fmt.Sprintf("%s/sub%d", pkg, j)
			if err := f(sub, false); err != nil {
				return err
			}
			for k := range 10 {
				if err := f(fmt.Sprintf("%s/file%d.json", sub, k), true); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// TestVFSBenchReport times every workload on a plain host directory and
// on FUSE mounts (kernel → GuestRelay → stream → ServeStream → provider)
// in one run and prints the ratios. bench/vfs.sh runs it.
func TestVFSBenchReport(t *testing.T) {
	if os.Getenv("VFS_BENCH") == "" {
		t.Skip("set VFS_BENCH=1 (bench/vfs.sh)")
	}
	targets := []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"host dir", func(t *testing.T) string { return t.TempDir() }},
		{"fuse RealDir", func(t *testing.T) string {
			p, err := NewRealDir(t.TempDir())
			must(t, err)
			return serve(t, p, ServeOptions{})
		}},
		{"fuse Overlay", func(t *testing.T) string {
			lp, err := NewRealDir(t.TempDir())
			must(t, err)
			o, err := NewOverlay(ReadOnly(lp), t.TempDir())
			must(t, err)
			return serve(t, o, ServeOptions{})
		}},
		{"fuse Memory", func(t *testing.T) string { return serve(t, NewMemory(256<<20, 0), ServeOptions{}) }},
	}
	rounds := 3
	times := map[string][]time.Duration{}
	for _, tg := range targets {
		dir := tg.dir(t)
		for _, w := range workloads {
			best := time.Duration(1 << 62)
			for r := range rounds {
				d := filepath.Join(dir, fmt.Sprintf("r%d", r))
				if strings.HasPrefix(w.name, "small files: write") || strings.HasPrefix(w.name, "storm: create") {
					os.MkdirAll(d, 0o755)
				}
				start := time.Now()
				if err := w.run(d); err != nil {
					t.Fatalf("%s on %s: %v", w.name, tg.name, err)
				}
				best = min(best, time.Since(start))
			}
			times[w.name] = append(times[w.name], best)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-46s", "workload (best of 3, ms)")
	for _, tg := range targets {
		fmt.Fprintf(&b, " %14s", tg.name)
	}
	b.WriteString("\n")
	for _, w := range workloads {
		fmt.Fprintf(&b, "%-46s", w.name)
		host := times[w.name][0]
		for i, d := range times[w.name] {
			ms := float64(d.Microseconds()) / 1000
			if i == 0 {
				fmt.Fprintf(&b, " %14.1f", ms)
			} else {
				fmt.Fprintf(&b, " %8.1f %4.1fx", ms, float64(d)/float64(host))
			}
		}
		b.WriteString("\n")
	}
	t.Log(b.String())
}

func BenchmarkFUSERead4K(b *testing.B) {
	p, err := NewRealDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	mnt := serve(b, p, ServeOptions{})
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(os.WriteFile(mnt+"/f", make([]byte, 4096), 0o644))
	b.ResetTimer()
	for b.Loop() {
		_, err := os.ReadFile(mnt + "/f")
		must(err)
	}
}

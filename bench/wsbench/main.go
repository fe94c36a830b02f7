// Command wsbench is bench/workspace.sh's helper: it makes a tree of many
// small files, and takes a workspace manifest of a tree the way airlock run
// does (parallel, with or without the hash cache).
//
//	wsbench mktree DIR N SIZE   # N files of SIZE bytes in DIR, 100 per directory
//	wsbench manifest [-cache FILE] DIR
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/internal/workspace"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "mktree":
		if len(os.Args) != 5 {
			usage()
		}
		n, err1 := strconv.Atoi(os.Args[3])
		size, err2 := strconv.Atoi(os.Args[4])
		if err1 != nil || err2 != nil {
			usage()
		}
		if err := mktree(os.Args[2], n, size); err != nil {
			fmt.Fprintln(os.Stderr, "wsbench:", err)
			os.Exit(1)
		}
	case "manifest":
		fs := flag.NewFlagSet("manifest", flag.ExitOnError)
		cache := fs.String("cache", "", "hash cache `FILE` (kept between runs)")
		fs.Parse(os.Args[2:])
		if fs.NArg() != 1 {
			usage()
		}
		c := workspace.NewCache()
		if *cache != "" {
			c = workspace.LoadCache(*cache)
		}
		start := time.Now()
		m, err := workspace.Scan(fs.Arg(0), workspace.ScanOptions{Cache: c})
		if err != nil {
			fmt.Fprintln(os.Stderr, "wsbench:", err)
			os.Exit(1)
		}
		if *cache != "" {
			if err := c.Save(*cache); err != nil {
				fmt.Fprintln(os.Stderr, "wsbench:", err)
				os.Exit(1)
			}
		}
		var bytes int64
		for _, e := range m {
			bytes += e.Size
		}
		fmt.Fprintf(os.Stderr, "%d entries, %.1f MiB in %s\n", len(m), float64(bytes)/(1<<20), time.Since(start).Round(time.Millisecond))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: wsbench mktree DIR N SIZE | wsbench manifest [-cache FILE] DIR")
	os.Exit(2)
}

func mktree(dir string, n, size int) error {
	r := rand.New(rand.NewSource(1))
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		r.Read(buf)
		if size >= 8 {
			binary.LittleEndian.PutUint64(buf, uint64(i)) // every file differs
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

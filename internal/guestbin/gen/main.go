// Command gen builds the native backend's lean guest (../lean) into ../bin,
// static and stripped, with its identity beside it: run it through
// `go generate ./internal/guestbin`. With -id it prints the identity of the
// sources as they are now and builds nothing (the staleness test's check).
package main

import "github.com/airlock-dev/airlock/internal/embedbin/gen"

func main() {
	// The tag builds the guest for the native backend alone: internal/guest
	// leaves out what only a VM's guest needs (its FUSE server).
	gen.Main(gen.Target{Pkg: "./lean", Tags: "airlock_native_guest", Out: "bin/guest"})
}

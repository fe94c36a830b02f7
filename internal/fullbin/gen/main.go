// Command gen builds the full airlock binary (cmd/airlock without the tag
// airlock_front) into ../bin, static and stripped, with its identity
// beside it: run it through `go generate ./internal/fullbin`, which makes
// the lean guest it embeds first. With -id it prints the identity of the
// sources as they are now and builds nothing (the staleness test's check).
package main

import "github.com/airlock-dev/airlock/internal/embedbin/gen"

func main() {
	gen.Main(gen.Target{Pkg: "../../cmd/airlock", Out: "bin/airlock"})
}

# Sourced by the bench scripts (from the repository's root) for what more
# than one of them needs.

# need CMD PACKAGE stops the bench, saying what to install, when CMD is
# missing.
need() { command -v "$1" >/dev/null || { echo "bench: $1 is missing: apt-get install $2" >&2; exit 1; }; }

# build_hello_go DIR builds DIR/hello-go: the smallest Go program, static,
# in a module of its own, the yardstick for a Go binary's start.
build_hello_go() {
	mkdir -p "$1/hello"
	printf 'package main\n\nfunc main() {}\n' >"$1/hello/main.go"
	printf 'module hello\n\ngo 1.22\n' >"$1/hello/go.mod"
	(cd "$1/hello" && CGO_ENABLED=0 GOFLAGS= go build -o "$1/hello-go" .)
}

# build_airlock OUT builds airlock as the README does (.ci/build), at OUT.
build_airlock() { .ci/build "$1"; }

# Sourced by the bench scripts (from the repository's root) for what more
# than one of them needs.

# build_hello_go DIR builds DIR/hello-go: the smallest Go program, static,
# in a module of its own, the yardstick for a Go binary's start.
build_hello_go() {
	mkdir -p "$1/hello"
	printf 'package main\n\nfunc main() {}\n' >"$1/hello/main.go"
	printf 'module hello\n\ngo 1.22\n' >"$1/hello/go.mod"
	(cd "$1/hello" && CGO_ENABLED=0 GOFLAGS= go build -o "$1/hello-go" .)
}

// Package nofile records the RLIMIT_NOFILE this process started with. The
// Go runtime's syscall package raises the soft limit at its init and keeps
// the original to itself, for the children os/exec starts; a child started
// otherwise should get the original too. Packages are initialized in the
// order of their import paths, each once all it imports are (the Go spec),
// so this one, which imports nothing and sorts before "syscall", reads the
// limit first: it must keep importing nothing.
package nofile

// Soft and Hard are RLIMIT_NOFILE when this process started; zeros where
// it was not read.
var Soft, Hard = limit()

package main

import (
	"io"
	"os"
)

// ioStreams is where a command reads and writes: the process's own, or
// buffers in a test of its run function.
type ioStreams struct {
	In          io.Reader
	Out, ErrOut io.Writer
}

func systemIO() *ioStreams { return &ioStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr} }

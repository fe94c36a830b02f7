// Package childspec hands a sandbox that airlock starts for its own use (a
// host command's, an MCP server's) its spec as one JSON document on an
// inherited descriptor, which `airlock run --spec-fd N` reads and checks
// like any run's: nothing is formatted into flags and parsed back, and
// secrets travel as secrets.Spec (where a value comes from), never values.
package childspec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/airlock-dev/airlock/internal/config"
)

// Spec is a child sandbox's whole request. Config is the settings as the
// child's run takes them: no config file is read beside it (the user's
// would widen the child past what its caller grants, and start the user's
// MCP servers and host commands inside it, recursively), so a Spec starts
// from New's defaults.
type Spec struct {
	Config config.Spec `json:"config"`
	// Name names the child's sandbox (airlock ls, audit, rm -f NAME).
	Name    string   `json:"name,omitempty"`
	Command []string `json:"command"`
	// Workdir is Command's directory inside; "" is the workspace.
	Workdir string `json:"workdir,omitempty"`
	// Hide are host paths the child never shows.
	Hide  []string `json:"hide,omitempty"`
	Quiet bool     `json:"quiet,omitempty"`
}

// New is a spec with the built-in defaults, as a run with no config file
// and no flag has them, running command.
func New(command ...string) Spec {
	return Spec{Config: config.DefaultSpec(), Command: command, Quiet: true}
}

// MaxSize bounds a spec on the wire: a command line and its grants, far
// below it.
const MaxSize = 1 << 20

// Fd is where Command puts the spec in the child.
const Fd = 3

// Command is exe (an airlock binary) running s in a sandbox of its own, as
// exec.CommandContext makes it with ctx:
// `exe run --spec-fd 3`, the spec in a file no path names at descriptor 3
// (a file, not a pipe: no writer to keep alive, whoever starts the command
// and whatever its size; on Linux a sealed memfd, elsewhere an unlinked
// temporary file). The caller closes the file once the command started
// (Close(cmd)).
func Command(ctx context.Context, exe string, s Spec) (*exec.Cmd, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("childspec: encode: %w", err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("childspec: the spec is %d bytes, more than %d", len(b), MaxSize)
	}
	f, err := specFile(b)
	if err != nil {
		return nil, fmt.Errorf("childspec: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, "run", "--spec-fd", fmt.Sprint(Fd))
	cmd.ExtraFiles = []*os.File{f} // descriptor 3 in the child
	return cmd, nil
}

// Close closes the spec file Command gave cmd (the child has its own).
func Close(cmd *exec.Cmd) {
	for _, f := range cmd.ExtraFiles {
		if f != nil {
			f.Close()
		}
	}
}

// Read reads a spec, at most MaxSize bytes; a field it does not know, a
// second document or a spec without a command is an error.
func Read(r io.Reader) (Spec, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return Spec{}, fmt.Errorf("childspec: read: %w", err)
	}
	if len(b) > MaxSize {
		return Spec{}, fmt.Errorf("childspec: the spec is more than %d bytes", MaxSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("childspec: decode: %w", err)
	}
	if dec.More() {
		return Spec{}, errors.New("childspec: decode: more than one spec")
	}
	if len(s.Command) == 0 {
		return Spec{}, errors.New("childspec: no command")
	}
	return s, nil
}

package supervisor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-dev/airlock/internal/otlp"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/internal/term"
)

// The background supervisor of a detached sandbox is the same binary run as
// `SELF <Command> DIR` with three descriptors handed over: the sandbox's lock
// (so the sandbox stays held while the parent exits), a pipe on which the
// parent waits for one line, "ok" or "error: MSG", and a pipe the secrets
// given by value come through (an agent's keys: they stay in memory).
const (
	lockFD    = 3
	readyFD   = 4
	secretsFD = 5
)

// Detach records spec in h, starts `self command DIR` in a session of its
// own (its output to the sandbox's log) holding h's lock, and waits until it
// reports whether the sandbox started. h is the child's afterwards: closed
// here on success, removed on any error. self "" is this executable. secs
// (given by value) go to the child over a pipe, never to a file.
func Detach(h *state.Handle, spec engine.Spec, self, command string, secs []*secrets.Secret) error {
	var handover bytes.Buffer
	if err := secrets.WriteHandover(&handover, secs); err != nil {
		h.Remove()
		return err
	}
	cfg, err := json.Marshal(spec)
	if err != nil {
		h.Remove()
		return fmt.Errorf("supervisor: detach: encode spec: %w", err)
	}
	if err := h.WriteRecord(state.Record{Backend: spec.Config.BackendName(), Origin: spec.Origin, Workspace: spec.Config.Workspace.Path, Command: spec.Command, Detached: true, Config: cfg}); err != nil {
		h.Remove()
		return err
	}
	logs, err := os.OpenFile(h.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		h.Remove()
		return err
	}
	defer logs.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		h.Remove()
		return err
	}
	defer readyR.Close()
	secR, secW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		h.Remove()
		return err
	}
	defer secW.Close()
	if self == "" {
		if self, err = os.Executable(); err != nil {
			self = "/proc/self/exe"
		}
	}
	cmd := exec.Command(self, command, h.Dir())
	cmd.Stdout, cmd.Stderr = logs, logs
	if h := spec.Config.Audit.OTLP.Headers; len(h) > 0 {
		cmd.Env = append(os.Environ(), otlp.DetachedHeaders+"="+otlp.EncodeHeaders(h))
	}
	cmd.ExtraFiles = []*os.File{h.LockFile(), readyW, secR} // lockFD, readyFD, secretsFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		readyW.Close()
		secR.Close()
		h.Remove()
		return fmt.Errorf("start background supervisor: %w", err)
	}
	readyW.Close()
	secR.Close()
	go func() { // a pipe's buffer may be smaller than the keys
		secW.Write(handover.Bytes())
		secW.Close()
		clear(handover.Bytes())
	}()
	h.Close() // the child holds the lock now
	cmd.Process.Release()
	// One line, bounded: the child is ours, but a runaway must not grow it.
	line, _ := bufio.NewReader(io.LimitReader(readyR, 64<<10)).ReadString('\n')
	line = strings.TrimSpace(line)
	if line != "ok" {
		if msg, ok := strings.CutPrefix(line, "error: "); ok {
			return errors.New(msg)
		}
		return fmt.Errorf("the background supervisor exited before the sandbox started; its log: %s", h.LogPath())
	}
	return nil
}

// Serve is the background side of Detach, run by `SELF <command> DIR`: it
// adopts the sandbox's lock (fd 3), reads the recorded spec, hosts the
// sandbox with no stdin, and reports on the ready pipe (fd 4) once it runs.
// It returns the exit code for the process.
func Serve(args []string, command string) int {
	ready := os.NewFile(readyFD, "ready")
	report := func(err error) {
		if err != nil {
			fmt.Fprintf(ready, "error: %v\n", err)
		} else {
			fmt.Fprintln(ready, "ok")
		}
		ready.Close()
	}
	if len(args) != 1 {
		report(fmt.Errorf("usage: airlock %s DIR", command))
		return ExitAirlock
	}
	h, err := state.Adopt(args[0], lockFD)
	if err != nil {
		report(err)
		return ExitAirlock
	}
	var spec engine.Spec
	rec, err := h.ReadRecord()
	if err == nil {
		err = json.Unmarshal(rec.Config, &spec)
	}
	if err != nil {
		h.Remove()
		report(fmt.Errorf("read sandbox spec: %w", err))
		return ExitAirlock
	}
	secIn := os.NewFile(secretsFD, "secrets")
	secs, err := secrets.ReadHandover(secIn)
	secIn.Close()
	if err != nil {
		h.Remove()
		report(err)
		return ExitAirlock
	}
	devnull, _ := os.Open(os.DevNull)
	code, err := Run(h, spec, term.IO{Stdin: devnull, Stdout: os.Stdout, Stderr: os.Stderr}, Options{Ready: report, Secrets: secs})
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock: %v\n", err)
	}
	return code
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/control"
	"github.com/airlock-dev/airlock/internal/engine"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/term"
)

func newAttachCmd() *cobra.Command {
	var keys string
	c := &cobra.Command{
		Use:   "attach [flags] ID|NAME",
		Short: "Connect this terminal to a detached sandbox's command (run -t -d)",
		Long: `Connect this terminal to the main command of a sandbox started with
airlock run -t -d (or airlock agent run -d): what it last wrote is shown
again and it is told the size of this terminal (a full-screen program draws
its screen again). Keys go to the command, ^C included; resizing this
terminal resizes the command's; signals sent to airlock attach go to the
command, but SIGHUP (this terminal went away), which detaches.

The detach keys (Ctrl-P Ctrl-Q unless --detach-keys, or the sandbox's
terminal.detach_keys setting, says otherwise) leave the command running:
airlock attach again to come back. When the command exits, so does attach,
with its exit status.

One terminal at a time: while one is attached, another attach is refused
(detach the first, or airlock exec -t ID -- bash for a second shell).`,
		Example: `  airlock run -t -d --name dev -- bash
  airlock attach dev                      # Ctrl-P Ctrl-Q to leave it running
  airlock attach --detach-keys ctrl-x,x dev`,
		Args: oneArg("sandbox ID or name"),
		RunE: func(c *cobra.Command, args []string) error {
			return attachRun(args[0], keys, c.Flags().Changed("detach-keys"))
		},
	}
	c.Flags().StringVar(&keys, "detach-keys", term.DefaultDetachKeys, "the `KEYS` that detach (comma-separated: a character or ctrl-X; default: the sandbox's terminal.detach_keys)")
	return c
}

func attachRun(ref, keys string, keysSet bool) error {
	if !term.IsTerminal(os.Stdin) || !term.IsTerminal(os.Stdout) {
		return usageError{"airlock attach needs a terminal: run it in one (for output alone, airlock logs " + ref + ")"}
	}
	e, err := resolveRunning(ref)
	if err != nil {
		return err
	}
	var spec engine.Spec
	if json.Unmarshal(e.Record.Config, &spec) == nil && (!spec.TTY || !spec.Detached || len(spec.Command) == 0) {
		return noTerminal(ref)
	}
	if !keysSet && spec.Config.Terminal.DetachKeys != "" {
		keys = spec.Config.Terminal.DetachKeys
	}
	detach, err := term.ParseKeys(keys)
	if err != nil {
		return usageError{"--detach-keys: " + err.Error()}
	}
	cl, err := control.Dial(e.SocketPath())
	if err != nil {
		return err
	}
	defer cl.Close()
	sigs, stop := control.Signals()
	defer stop()
	a, err := cl.Attach(term.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}, sigs, detach)
	var perr *proto.Error
	if errors.As(err, &perr) {
		switch perr.Message {
		case control.ErrNoTerminal.Error():
			return noTerminal(ref)
		case control.ErrAttached.Error():
			return fmt.Errorf("sandbox %s already has a terminal attached: detach that one first (%s), or open another shell with airlock exec -t %s -- bash", ref, keys, ref)
		}
		return errors.New(perr.Message)
	}
	if err != nil {
		return err
	}
	if a.Detached {
		fmt.Fprintf(os.Stderr, "\r\nairlock: detached from %s; it goes on running (airlock attach %s to come back)\r\n", ref, ref)
		return nil
	}
	return exitError{a.Code}
}

func noTerminal(ref string) error {
	return fmt.Errorf("sandbox %s has no terminal to attach to: only a command started with airlock run -t -d has one (airlock logs %s shows this one's output; airlock exec -t %s -- bash opens a shell)", ref, ref, ref)
}

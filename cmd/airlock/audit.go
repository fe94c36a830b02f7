package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/ca"
	"github.com/airlock-dev/airlock/internal/state"
)

// auditOptions is what airlock audit needs.
type auditOptions struct {
	IO     *ioStreams
	Ref    string // the sandbox, by ID or name
	Follow bool
	JSON   bool
	// Resolve finds a sandbox by ID, unique ID prefix or name.
	Resolve func(ref string) (state.Entry, error)
}

func newAuditCmd(runF func(*auditOptions) error) *cobra.Command {
	o := &auditOptions{IO: systemIO(), Resolve: resolve}
	c := &cobra.Command{
		Use:   "audit [-f] [--json] ID|NAME",
		Short: "Print a sandbox's audit log: requests, refusals, secret swaps, commands, files, approvals",
		Args:  oneArg("sandbox ID or name"),
		RunE: func(c *cobra.Command, args []string) error {
			o.Ref = args[0]
			o.IO.Out, o.IO.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			if runF != nil {
				return runF(o)
			}
			return auditRun(o)
		},
	}
	c.Flags().BoolVarP(&o.Follow, "follow", "f", false, "keep printing until the sandbox stops")
	c.Flags().BoolVar(&o.JSON, "json", false, "print the JSON records")
	return c
}

func auditRun(o *auditOptions) error {
	e, err := o.Resolve(o.Ref)
	if err != nil {
		return err
	}
	path := filepath.Join(e.Dir, "audit.jsonl")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && !o.Follow {
		return fmt.Errorf("sandbox %s has no audit log: it had no network (run with --allow-host to give it one)", o.Ref)
	}
	color := false
	if f, ok := o.IO.Out.(*os.File); ok && !o.JSON {
		color = audit.UseColor(f)
	}
	enc := json.NewEncoder(o.IO.Out)
	print := func(r audit.Record) error {
		if o.JSON {
			return enc.Encode(r)
		}
		_, err := fmt.Fprintln(o.IO.Out, audit.Format(r, color))
		return err
	}
	if o.Follow {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return audit.Follow(ctx, path, print, func() bool {
			cur, err := o.Resolve(e.Record.ID)
			return err != nil || cur.Status.State != state.Running
		})
	}
	for _, p := range audit.Files(path) {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = audit.Read(f, print, func(line int, err error) {
			fmt.Fprintf(o.IO.ErrOut, "airlock: %s line %d unreadable: %v\n", filepath.Base(p), line, err)
		})
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func newCACmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ca",
		Short: "Print the path and certificate of airlock's local CA (made on first use)",
		Long: `airlock intercepts HTTPS from sandboxes with a local certificate authority,
created on first use under your config dir (key mode 0600). Sandboxes trust it
automatically; this prints it, e.g. to inspect it or trust it elsewhere.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			dir, err := ca.Dir()
			if err != nil {
				return err
			}
			authority, err := ca.Load(dir)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "%s\n", authority.Path())
			_, err = c.OutOrStdout().Write(authority.CertPEM())
			return err
		},
	}
}

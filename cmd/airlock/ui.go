package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/ui"
)

// uiOptions is what airlock ui needs.
type uiOptions struct {
	IO     *ioStreams
	Listen string // 127.0.0.1:PORT
	Open   bool   // open the page in a browser
}

func newUICmd(runF func(*uiOptions) error) *cobra.Command {
	o := &uiOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:PORT] [--open]",
		Short: "Answer approval requests from a web page on this machine",
		Long: `Serve a web page where you answer what sandboxes ask: every running sandbox's
requests to reach a host no rule covers, newest first, each with a countdown
to when it is denied unanswered. Allow or deny it once, for the sandbox's
session, for the project or everywhere, optionally as a wildcard
(*.example.com). The page also lists the last decisions (Undo removes a saved
one) and the saved decisions (Revoke). It updates live; a banner says when
it lost its connection to airlock ui.

The page is local only: it listens on 127.0.0.1 (a random port unless
--listen says one), which sandboxes cannot reach, and refuses any other Host
name. The URL it prints carries a random token: whoever has it can answer
requests, so do not share it. Opening it once keeps the token in a cookie
for that browser and drops it from the address bar. The page stops with
airlock ui (Ctrl-C); a new run prints a new token.`,
		Example: `  airlock ui --open
  airlock ui --listen 127.0.0.1:8765`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.IO.Out, o.IO.ErrOut = c.OutOrStdout(), c.ErrOrStderr()
			if runF != nil {
				return runF(o)
			}
			return uiRun(o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Listen, "listen", "127.0.0.1:0", "serve on `127.0.0.1:PORT` (port 0 picks one); nothing but loopback")
	f.BoolVar(&o.Open, "open", false, "open the page in your browser (xdg-open)")
	return c
}

func uiRun(o *uiOptions) error {
	hub, err := newHub()
	if err != nil {
		return err
	}
	srv, err := ui.New(hub, ui.Options{Listen: o.Listen})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(o.IO.Out, "airlock ui: open %s\n(keep the URL private: its token answers requests; Ctrl-C stops the page)\n", srv.URL())
	if o.Open {
		openBrowser(o.IO.ErrOut, srv.URL())
	}
	return srv.Serve(ctx)
}

// openBrowser hands url to xdg-open, or says it could not.
func openBrowser(errOut io.Writer, url string) {
	path, err := exec.LookPath("xdg-open")
	if err != nil {
		fmt.Fprintln(errOut, "airlock ui: could not open a browser (no xdg-open); open the URL above yourself")
		return
	}
	cmd := exec.Command(path, url)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(errOut, "airlock ui: could not open a browser: %v; open the URL above yourself\n", err)
		return
	}
	go cmd.Wait()
}

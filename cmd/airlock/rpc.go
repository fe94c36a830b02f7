package main

import (
	"context"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/rpc"
)

// rpcOptions is what airlock rpc needs: stdin and stdout carry the protocol.
type rpcOptions struct {
	IO *ioStreams
}

func newRPCCmd(runF func(*rpcOptions) error) *cobra.Command {
	o := &rpcOptions{IO: systemIO()}
	return &cobra.Command{
		Use:   "rpc",
		Short: "Serve the programmatic API: JSON-RPC 2.0 on stdin/stdout",
		Long: `Serve one sandbox over JSON-RPC 2.0 on stdin and stdout, one message per
line (also: airlock --rpc). Clients in Go (sandbox/client), Python
(clients/python) and TypeScript (clients/typescript) drive it.

Methods: create (the sandbox's config: resources, network, vfs, env),
exec, exec_stream (several responses with the request's id; the last one
has exit_code), write_file, read_file, list_files (byte payloads in
base64), close. Notifications: event (type network, file or exec).

A request line may be up to ` + strconv.Itoa(rpc.MaxLine>>20) + ` MiB (a 16 MiB file in base64); a
longer one is refused with -32600 and skipped. Errors use the JSON-RPC
codes (-32700, -32600, -32601, -32602) and -32000 for sandbox failures,
with data.kind saying which. close, the end of stdin, SIGINT or SIGTERM
end the session: the sandbox and every process in it are torn down
(requests in flight at the end of stdin get 5 s to finish). A client that
reads none of the output for 60 s while some is pending is taken as gone.
Diagnostics go to stderr; stdout carries only protocol messages.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(o)
			}
			return rpcRun(o)
		},
	}
}

func rpcRun(o *rpcOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A client that goes away must not kill us with SIGPIPE before the
	// sandbox is torn down: writes fail instead, and the session ends.
	signal.Ignore(syscall.SIGPIPE)
	return rpc.Serve(ctx, o.IO.In, o.IO.Out, rpc.Options{})
}

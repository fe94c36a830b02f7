package main

import (
	"context"
	"fmt"
	"maps"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/rpc"
	"github.com/airlock-dev/airlock/internal/state"
	"github.com/airlock-dev/airlock/sandbox"
)

// rpcOptions is what airlock rpc needs: stdin and stdout carry the
// protocol; the flags are defaults under every create.
type rpcOptions struct {
	IO      *ioStreams
	Config  string
	Image   string
	Backend string
	Hosts   []string
}

func newRPCCmd(runF func(*rpcOptions) error) *cobra.Command {
	o := &rpcOptions{IO: systemIO()}
	c := &cobra.Command{
		Use:   "rpc",
		Short: "Serve the programmatic API: JSON-RPC 2.0 on stdin/stdout",
		Long: `Serve one sandbox over JSON-RPC 2.0 on stdin and stdout, one message per
line (also: airlock --rpc). Clients in Go (sandbox/client), Python
(clients/python) and TypeScript (clients/typescript) drive it.

Methods: create (the sandbox's config: backend, image, resources,
network, vfs, env, approvals),
exec, exec_stream (several responses with the request's id; the last one
has exit_code), write_file, read_file, list_files (byte payloads in
base64), approve and deny (an approval's id), close; and, with no create
needed, list, get and kill ({"id": ID or name}) of every sandbox in the
state dir, as airlock ls --json, get and kill. Notifications: event
(type network, file, exec, approval, or another audit kind (mcp,
hostexec, llm, workspace, lifecycle) with the record in "record").
create refuses a key it does not know (-32602 naming it).

A request line may be up to ` + strconv.Itoa(rpc.MaxLine>>20) + ` MiB (a 16 MiB file in base64); a
longer one is refused with -32600 and skipped. Errors use the JSON-RPC
codes (-32700, -32600, -32601, -32602) and -32000 for sandbox failures,
with data.kind saying which. close, the end of stdin, SIGINT or SIGTERM
end the session: the sandbox and every process in it are torn down
(requests in flight at the end of stdin get 5 s to finish). A client that
reads none of the output for 60 s while some is pending is taken as gone.
Diagnostics go to stderr; stdout carries only protocol messages.

Defaults for every create of the session: --config FILE (a config file's
backend, image, network hosts, limits.memory/cpus, approvals), --image,
--backend and --allow-host; create's params win, and its host lists add
to these.

Ordering: requests start in the order received and run concurrently (wait
for a response to order two); one read after create waits for the
sandbox; close waits for every request before it to finish and answer.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(o)
			}
			return rpcRun(o)
		},
	}
	c.Flags().StringVar(&o.Config, "config", "", "defaults for every create from this config `FILE` (the config file format; create's params win, its hosts add to these)")
	c.Flags().StringVar(&o.Image, "image", "", "default image for every create (as create's image)")
	c.Flags().StringVar(&o.Backend, "backend", "", "default backend for every create: native, docker or kubernetes")
	c.Flags().StringArrayVar(&o.Hosts, "allow-host", nil, "let every sandbox of this session reach `HOST` (as create's network.allowed_hosts; repeatable)")
	return c
}

// rpcKeys are the config keys airlock rpc --config takes: those create has
// a param for. Another key is refused, named, rather than ignored.
var rpcKeys = map[string]bool{
	"version": true, "backend": true, "image": true,
	"network.allow_hosts": true, "network.tunnel_hosts": true, "network.deny_hosts": true,
	"network.add_hosts": true, "network.upstream_ca": true,
	"limits.memory": true, "limits.cpus": true,
	"approvals.mode": true, "approvals.timeout": true,
}

// rpcDefaults reads --config and the flags through the config files'
// parser and merge (one spec), as the create config filled in under
// every create; nil when none is given.
func rpcDefaults(file, image, backend string, hosts []string) (*sandbox.Config, error) {
	if file == "" && image == "" && backend == "" && len(hosts) == 0 {
		return nil, nil
	}
	layers := []*config.Layer{config.Defaults()}
	if file != "" {
		l, err := config.ReadFile(file, config.SourceFlag)
		if err != nil {
			return nil, usageError{fmt.Sprintf("--config %s: %v", file, err)}
		}
		if l == nil {
			return nil, usageError{fmt.Sprintf("--config %s: no such file", file)}
		}
		for _, k := range l.Keys() {
			if !rpcKeys[k] {
				return nil, usageError{fmt.Sprintf("--config %s: %s is not a create setting (airlock rpc takes %s)", file, k, strings.Join(slices.Sorted(maps.Keys(rpcKeys)), ", "))}
			}
		}
		layers = append(layers, l)
	}
	fl := config.NewLayer(config.SourceFlag, "")
	for _, f := range []struct {
		key, flag string
		v         []string
	}{{"image", "--image", nonEmpty(image)}, {"backend", "--backend", nonEmpty(backend)}, {"network.allow_hosts", "--allow-host", hosts}} {
		if len(f.v) == 0 {
			continue
		}
		if err := fl.SetFlag(f.key, f.flag, f.v); err != nil {
			return nil, usageError{err.Error()}
		}
	}
	spec, _ := config.Merge(append(layers, fl)...)
	if err := spec.Network.CheckTunnels(); err != nil {
		return nil, usageError{err.Error()}
	}
	d := &sandbox.Config{Backend: spec.Backend, Image: spec.Image}
	if d.Backend == config.BackendNative {
		d.Backend = ""
	}
	n := spec.Network
	if len(n.AllowHosts)+len(n.TunnelHosts)+len(n.DenyHosts)+len(n.AddHosts) > 0 || n.UpstreamCA != "" {
		d.Network = &sandbox.NetworkConfig{AllowedHosts: n.AllowHosts, TunnelHosts: n.TunnelHosts, DeniedHosts: n.DenyHosts, AddHosts: n.AddHosts, UpstreamCA: n.UpstreamCA}
	}
	if lim := spec.Limits; lim.MemoryBytes > 0 || lim.CPUs > 0 {
		d.Resources = &sandbox.Resources{MemoryMB: lim.MemoryBytes >> 20, CPUs: lim.CPUs}
	}
	if a := spec.Approvals; a.Mode == config.ApprovalsAsk {
		d.Approvals = &sandbox.ApprovalsConfig{Mode: a.Mode, TimeoutSeconds: int64(a.Timeout.Seconds())}
	}
	// What create would refuse is refused now, once.
	if err := sandbox.Check(d); err != nil {
		return nil, usageError{fmt.Sprintf("the session's defaults (--config, --image, --backend, --allow-host): %v", err)}
	}
	return d, nil
}

// rpcManager serves list, get and kill as airlock ls --json, get and kill
// do, with the same JSON.
func rpcManager() *rpc.Manager {
	notFound := func(err error) error {
		return &sandbox.Error{Kind: sandbox.KindNotFound, Message: err.Error()}
	}
	return &rpc.Manager{
		List: func() (any, error) {
			store, err := openStore()
			if err != nil {
				return nil, err
			}
			es, err := store.List()
			if err != nil {
				return nil, err
			}
			return listing(es), nil
		},
		Get: func(ref string) (any, error) {
			e, err := resolve(ref)
			if err != nil {
				return nil, notFound(err)
			}
			out := listing([]state.Entry{e})[0]
			out.LLM = llmTotals(e)
			return out, nil
		},
		Kill: func(ref string) error {
			e, err := resolve(ref)
			if err != nil {
				return notFound(err)
			}
			if err := kill(e); err != nil {
				return &sandbox.Error{Kind: sandbox.KindIO, Message: fmt.Sprintf("kill %s: %v", ref, err)}
			}
			return nil
		},
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func rpcRun(o *rpcOptions) error {
	d, err := rpcDefaults(o.Config, o.Image, o.Backend, o.Hosts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// A client that goes away must not kill us with SIGPIPE before the
	// sandbox is torn down: writes fail instead, and the session ends.
	signal.Ignore(syscall.SIGPIPE)
	return rpc.Serve(ctx, o.IO.In, o.IO.Out, rpc.Options{Defaults: d, Manager: rpcManager()})
}

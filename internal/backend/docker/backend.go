package docker

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/link"
)

// Backend runs sandboxes as hardened containers of a local Docker Engine.
type Backend struct {
	Exe string // the static airlock binary; default this executable
}

// Name is "docker".
func (Backend) Name() string { return "docker" }

// Caps: no network link (a container reaches the gateway through its proxy
// door, relayed by the guest), no overlayfs inside (the engine stages a
// copy), and only Close guarantees every process is gone.
func (Backend) Caps() backend.Caps {
	return backend.Caps{
		NoLink:     "a docker sandbox reaches the gateway through its proxy door",
		NoOverlay:  "the docker backend stages a copy of the workspace instead; the host is untouched until you apply, as with overlay",
		UsesRunDir: true,
	}
}

// Prepare has nothing to start early: the container is created in Start.
func (b Backend) Prepare(context.Context, *backend.Spec) (backend.Pending, error) {
	return pending{b}, nil
}

// Prune removes containers of stateRoot's sandboxes that are not running.
func (Backend) Prune(ctx context.Context, stateRoot string, running func(id string) bool) ([]string, error) {
	// A prune with no docker sandbox asks too: an engine that does not
	// answer soon is not waited for.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := Connect(cctx)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	return Prune(ctx, cli, stateRoot, running)
}

type pending struct{ b Backend }

func (pending) Close() error { return nil }

// Start translates spec into a container: the same hidden paths (masked)
// and Landlock rules any backend applies, its binds and limits. The first
// command is Exec'd once the container's guest is ready.
func (p pending) Start(ctx context.Context, spec *backend.Spec, register func(cgroups []string) error, first *backend.Command) (backend.Instance, error) {
	c := Config{
		ID: spec.ID, Image: spec.Image, StateRoot: spec.StateRoot, RunDir: spec.RunDir, Exe: p.b.Exe,
		Hostname: backend.Hostname(spec.ID), Workspace: spec.Workspace, WorkspaceSource: spec.WorkspaceSource,
		Home: backend.SandboxHome(spec.HostHome), HomeDir: spec.Home, RO: spec.RO, RW: spec.RW,
		Mask: backend.Hidden(spec, os.Getenv), Landlock: backend.Landlock(spec), Relay: spec.Relay, TmpBytes: spec.TmpBytes,
		Limits: Limits{MemoryBytes: spec.Limits.MemoryBytes, CPUs: spec.Limits.CPUs, Pids: spec.Limits.Pids},
	}
	for _, f := range spec.Files {
		c.Files = append(c.Files, File{Source: f.Source, Target: f.Target})
	}
	if len(spec.Binds) > 0 || spec.Overlay != nil || spec.Net != nil {
		return nil, errors.New("docker: binds at other paths, an overlay inside and a network link are not supported by the docker backend")
	}
	// A signal while the container starts ends the start, which then removes
	// the container: nothing is left behind (a native guest dies with its
	// parent; a container would not).
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	sb, err := Start(ctx, c, func() error {
		if register == nil {
			return nil
		}
		return register(nil)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.New("interrupted while the container started; it was removed")
		}
		return nil, err
	}
	return instance{sb, backend.Launch(sb.client, first)}, nil
}

// instance is a running container as the backend contract sees it.
type instance struct {
	*Sandbox
	first *backend.Launched
}

func (i instance) First() (*guestclient.Process, error) { return i.first.Wait() }

func (i instance) Warnings() []string { return i.Sandbox.Warnings }

func (instance) Link() *link.Link { return nil }

func (i instance) GuestPID() int { return i.Sandbox.guestPID }

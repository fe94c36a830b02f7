package supervisor

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-dev/airlock/internal/backend/docker"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/proto"
	"github.com/airlock-dev/airlock/internal/state"
)

// Backends.
const (
	BackendNative = "native"
	BackendDocker = "docker"
)

// DefaultImage is the docker backend's image when --image is not given.
const DefaultImage = "airlock/minimal:latest"

// sandbox is what the supervisor needs of a running sandbox, whichever
// backend runs it: both speak to the same guest agent.
type sandbox interface {
	Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*guestclient.Process, error)
	Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error)
	Done() <-chan struct{}
	OOMKilled() bool
	Close() error
}

func (s Spec) backend() string {
	if s.Backend == "" {
		return BackendNative
	}
	return s.Backend
}

// startNative starts spec's sandbox in namespaces, with the guest spawned
// already if spawned is not nil. register runs while the guest sets up.
func startNative(spawned *native.Sandbox, spec Spec, stdio IO, register func(cgroups []string) error) (sandbox, []string, error) {
	if spawned == nil {
		var err error
		if spawned, err = native.Spawn(native.Options{Stderr: stdio.Stderr}, spec.Native.Limits); err != nil {
			return nil, nil, err
		}
	}
	if err := spawned.Start(context.Background(), spec.Native, register); err != nil {
		return nil, nil, err
	}
	return spawned, spawned.Warnings, nil
}

// startDocker starts spec's sandbox as a container with the native plan's
// hidden paths and Landlock rules. register runs while the container starts.
func startDocker(h *state.Handle, spec Spec, register func(cgroups []string) error) (sandbox, []string, error) {
	plan, err := native.Plan(spec.Native, os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	n := spec.Native
	c := docker.Config{
		ID: h.ID(), Image: spec.Image, StateRoot: stateRoot(h), RunDir: runDir(h.SocketPath()),
		Hostname: native.Hostname(h.ID()), Workspace: n.Workspace, WorkspaceSource: n.WorkspaceSource,
		Home: native.SandboxHome(n.HostHome), HomeDir: n.Home, RO: n.RO, RW: n.RW,
		Mask: plan.Hide, Landlock: plan.Landlock, Relay: n.Relay, TmpBytes: n.TmpBytes,
		Limits: docker.Limits{MemoryBytes: n.Limits.MemoryBytes, CPUs: n.Limits.CPUs, Pids: n.Limits.Pids},
	}
	if c.Image == "" {
		c.Image = DefaultImage
	}
	for _, f := range n.Files {
		c.Files = append(c.Files, docker.File{Source: f.Source, Target: f.Target})
	}
	// A signal while the container starts ends the start, which then removes
	// the container: nothing is left behind (a native guest dies with its
	// parent; a container would not).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	sb, err := docker.Start(ctx, c, func() error { return register(nil) })
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, errors.New("interrupted while the container started; it was removed")
		}
		return nil, nil, err
	}
	return sb, sb.Warnings, nil
}

// stateRoot is the store a sandbox's directory (ROOT/sandboxes/ID) is in.
func stateRoot(h *state.Handle) string { return filepath.Dir(filepath.Dir(h.Dir())) }

// runDir holds a container's control socket, beside the supervisor's own
// under a path no longer than it (so it fits sun_path wherever that does).
func runDir(ctl string) string {
	if dir, base := filepath.Split(ctl); base == "ctl.sock" {
		return dir + "g"
	}
	return strings.TrimSuffix(ctl, ".sock") + ".g"
}

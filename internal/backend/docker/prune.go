package docker

import (
	"context"
	"fmt"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
)

// Leftover is a container airlock made for a sandbox.
type Leftover struct {
	Sandbox, Container, State string
}

// List returns the containers made for sandboxes of the state root
// stateRoot, running or not.
func List(ctx context.Context, cli *client.Client, stateRoot string) ([]Leftover, error) {
	f := filters.NewArgs(filters.Arg("label", LabelSandbox), filters.Arg("label", LabelState+"="+stateRoot))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, EngineError(cli.DaemonHost(), err)
	}
	out := make([]Leftover, 0, len(cs))
	for _, c := range cs {
		out = append(out, Leftover{Sandbox: c.Labels[LabelSandbox], Container: c.ID, State: c.State})
	}
	return out, nil
}

// Prune removes the containers of stateRoot's sandboxes that running says
// are not running (a crashed supervisor's, or one whose record is gone),
// and returns the sandbox IDs it removed.
func Prune(ctx context.Context, cli *client.Client, stateRoot string, running func(id string) bool) ([]string, error) {
	cs, err := List(ctx, cli, stateRoot)
	if err != nil {
		return nil, err
	}
	var removed []string
	var firstErr error
	for _, c := range cs {
		if running(c.Sandbox) {
			continue
		}
		if err := cli.ContainerRemove(ctx, c.Container, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !isGone(err) {
			if firstErr == nil {
				firstErr = fmt.Errorf("docker: remove container %s: %w", ContainerName(c.Sandbox), err)
			}
			continue
		}
		removed = append(removed, c.Sandbox)
	}
	return removed, firstErr
}

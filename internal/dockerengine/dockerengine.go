// Package dockerengine connects to the local Docker Engine the way airlock
// uses it (the docker backend, airlock images) and explains in one line what
// to do when it cannot.
package dockerengine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/docker/docker/client"
)

// LabelImage is on images `airlock images build` made: the variant.
const LabelImage = "airlock.image"

// Connect returns a client for the Docker engine named by the environment
// (DOCKER_HOST, default the local socket), speaking whatever API version the
// engine does. It checks that the engine answers, and explains what to do
// when it does not.
func Connect(ctx context.Context) (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker: %w (check DOCKER_HOST)", err)
	}
	ping, err := cli.Ping(ctx)
	if err != nil {
		cli.Close()
		return nil, EngineError(cli.DaemonHost(), err)
	}
	cli.NegotiateAPIVersionPing(ping)
	return cli, nil
}

// EngineError turns a failure to reach the engine at host into one line that
// says what to do; other errors are returned as they are.
func EngineError(host string, err error) error {
	if err == nil {
		return nil
	}
	sock, isUnix := strings.CutPrefix(host, "unix://")
	switch {
	case errors.Is(err, syscall.EACCES) || errors.Is(err, fs.ErrPermission):
		if isUnix {
			return fmt.Errorf("docker: permission denied on the Docker socket %s: add your user to the docker group (then log in again), or run airlock as root", sock)
		}
		return fmt.Errorf("docker: permission denied by the Docker engine at %s: %v", host, err)
	case errors.Is(err, syscall.ENOENT) || isUnix && missing(sock):
		return fmt.Errorf("docker: no Docker engine at %s (the socket does not exist): install Docker (apt-get install docker.io) and start dockerd, or set DOCKER_HOST", host)
	case errors.Is(err, syscall.ECONNREFUSED) || client.IsErrConnectionFailed(err):
		return fmt.Errorf("docker: the Docker engine at %s is not running: start dockerd (or systemctl start docker), or set DOCKER_HOST", host)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("docker: the Docker engine at %s did not answer in time: check that dockerd is healthy", host)
	}
	return fmt.Errorf("docker: %w", err)
}

func missing(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

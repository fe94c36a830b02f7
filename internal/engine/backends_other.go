//go:build !linux

package engine

import (
	"context"
	"errors"
	"os"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/config"
)

// errNoBackend is every backend's answer off Linux: the native backend is
// Linux's namespaces, and the docker and vm backends run a Linux guest
// through Linux-only host code; a macOS backend (Seatbelt,
// Virtualization.framework) will plug in here.
var errNoBackend = errors.New("engine: the native backend needs Linux, and so, in this build, do docker and vm: on this system no backend runs sandboxes yet")

func backendFor(name, _ string, _ *config.Spec) (backend.Backend, error) {
	switch name {
	case config.BackendNative, config.BackendDocker, config.BackendVM, config.BackendKubernetes:
		return nil, errNoBackend
	}
	return nil, errors.New("backend " + name + ": use native, docker, vm or kubernetes")
}

// NetworkMode says no native sandbox runs here.
func NetworkMode() (mode, why string) { return config.ModeProxy, errNoBackend.Error() }

// VMCheck is `airlock doctor`'s row for the vm backend: not here.
func VMCheck(context.Context) (ok bool, detail, impact string) {
	return false, "not Linux", "--backend vm is unavailable: " + errNoBackend.Error()
}

// CommandUser is the caller's own ids.
func CommandUser(_, _ string) (uid, gid int) { return os.Geteuid(), os.Getegid() }

// KubernetesCheck is `airlock doctor`'s row for the kubernetes backend: not here.
func KubernetesCheck(context.Context, *config.Spec) (ok bool, detail, impact string) {
	return false, "not Linux", "--backend kubernetes is unavailable: " + errNoBackend.Error()
}

// KubernetesPods finds no Pods here.
func KubernetesPods(context.Context, string) (map[string]KubePod, error) { return nil, errNoBackend }

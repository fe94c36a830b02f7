package engine

// The backends, Linux's alone for now: native, and the ones whose libraries
// (the Docker client, go-fuse through the vm backend) every airlock binary
// links, so their package initialisers must stay cheap (see
// bench/inits.sh). Off Linux, backends_other.go says none runs here.

import (
	"context"
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/docker"
	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/backend/vm"
	"github.com/airlock-dev/airlock/internal/config"
)

// backendFor is the only place a backend is chosen by name: native, or one
// of otherBackends.
func backendFor(name, exe string) (backend.Backend, error) {
	if name == config.BackendNative {
		return native.Backend{Options: native.Options{Exe: exe, GuestCache: guestCache(exe)}}, nil
	}
	if open := otherBackends[name]; open != nil {
		return open(exe)
	}
	return nil, fmt.Errorf("backend %q: use native, docker or vm", name)
}

// otherBackends are the backends besides native, by name.
var otherBackends = map[string]func(exe string) (backend.Backend, error){
	config.BackendDocker: func(string) (backend.Backend, error) { return docker.Backend{}, nil },
	config.BackendVM: func(exe string) (backend.Backend, error) {
		dataDir, err := config.DataDir()
		if err != nil {
			return nil, err
		}
		return vm.Backend{Options: vm.Options{Exe: exe, DataDir: dataDir}}, nil
	},
}

// NetworkMode says which door a native sandbox would get here, and why.
func NetworkMode() (mode, why string) {
	caps := native.Backend{}.Caps()
	if caps.NoLink != "" {
		return config.ModeProxy, caps.NoLink
	}
	return config.ModeTransparent, "every packet goes through the gateway's network stack"
}

// VMCheck is `airlock doctor`'s row for the vm backend (see vm.Check).
func VMCheck(ctx context.Context) (ok bool, detail, impact string) {
	dataDir, err := config.DataDir()
	if err != nil {
		return false, err.Error(), "--backend vm is unavailable"
	}
	return vm.Check(ctx, vm.Options{DataDir: dataDir})
}

// CommandUser is the uid and gid a sandbox of backend runs its commands as
// for workspace: the caller's own (a native sandbox of root is uid 0
// inside, mapped), or, in a container, the one docker.User picks.
func CommandUser(backendName, workspace string) (uid, gid int) {
	if backendName == config.BackendDocker {
		if _, err := fmt.Sscanf(docker.User(workspace), "%d:%d", &uid, &gid); err == nil {
			return uid, gid
		}
	}
	return os.Geteuid(), os.Getegid()
}

package engine

// The backends, Linux's alone for now: native, and the ones whose libraries
// (the Docker client, go-fuse through the vm backend) every airlock binary
// links, so their package initialisers must stay cheap (see
// bench/inits.sh). Off Linux, backends_other.go says none runs here.

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/docker"
	"github.com/airlock-dev/airlock/internal/backend/kubernetes"
	"github.com/airlock-dev/airlock/internal/backend/native"
	"github.com/airlock-dev/airlock/internal/backend/vm"
	"github.com/airlock-dev/airlock/internal/config"
)

// backendFor is the only place a backend is chosen by name: native, or one
// of otherBackends. c, if not nil, is the sandbox's config (a kubernetes
// sandbox's cluster).
func backendFor(name, exe string, c *config.Spec) (backend.Backend, error) {
	if name == config.BackendNative {
		return native.Backend{Options: native.Options{Exe: exe, GuestCache: guestCache(exe)}}, nil
	}
	if c == nil {
		c = &config.Spec{}
	}
	if open := otherBackends[name]; open != nil {
		return open(exe, c)
	}
	return nil, fmt.Errorf("backend %q: use native, docker, vm or kubernetes", name)
}

// otherBackends are the backends besides native, by name.
var otherBackends = map[string]func(exe string, c *config.Spec) (backend.Backend, error){
	config.BackendDocker: func(string, *config.Spec) (backend.Backend, error) { return docker.Backend{}, nil },
	config.BackendKubernetes: func(_ string, c *config.Spec) (backend.Backend, error) {
		return kubernetes.Backend{Options: kubeOptions(c.Kubernetes), ReadyTimeout: c.Kubernetes.ReadyTimeout}, nil
	},
	config.BackendVM: func(exe string, _ *config.Spec) (backend.Backend, error) {
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

// KubernetesCheck is `airlock doctor`'s row for the kubernetes backend
// with c's cluster settings (see kubernetes.Check).
func KubernetesCheck(ctx context.Context, c *config.Spec) (ok bool, detail, impact string) {
	return kubernetes.Check(ctx, kubeOptions(c.Kubernetes))
}

// KubernetesPods finds the Pods of stateRoot's sandboxes in the cluster of
// the kubeconfig's current context, by sandbox ID.
func KubernetesPods(ctx context.Context, stateRoot string) (map[string]KubePod, error) {
	c, err := kubernetes.Connect("", "")
	if err != nil {
		return nil, err
	}
	pods, err := kubernetes.List(ctx, c, stateRoot)
	if err != nil {
		return nil, err
	}
	out := map[string]KubePod{}
	for _, p := range pods {
		out[p.Sandbox] = KubePod{Pod: p.Namespace + "/" + p.Pod, Node: p.Node}
	}
	return out, nil
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

// kubeOptions is the kubernetes backend's view of config's section.
func kubeOptions(k config.Kubernetes) kubernetes.Options {
	kv := func(l []string) map[string]string {
		if len(l) == 0 {
			return nil
		}
		m := map[string]string{}
		for _, e := range l {
			if k, v, ok := strings.Cut(e, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	return kubernetes.Options{Context: k.Context, Namespace: k.Namespace, RuntimeClass: k.RuntimeClass,
		Image: k.Image, NodeSelector: kv(k.NodeSelector), Labels: kv(k.Labels)}
}

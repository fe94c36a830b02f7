package engine

// The backends besides native and the MCP proxy, whose libraries (the
// Docker client, the MCP SDK, go-fuse through the vm backend) every
// airlock binary links: their package initialisers run at every start, so
// they must stay cheap (see bench/inits.sh).

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/airlock-dev/airlock/internal/approval"
	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/docker"
	"github.com/airlock-dev/airlock/internal/backend/kubernetes"
	"github.com/airlock-dev/airlock/internal/backend/vm"
	"github.com/airlock-dev/airlock/internal/config"
	"github.com/airlock-dev/airlock/internal/mcpproxy"
)

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

// startMCP starts s's MCP servers (raw: config.Spec.MCPServers) behind
// their policy.
func startMCP(s *Sandbox, raw any, ask func(context.Context, approval.Request) approval.Decision, protected []string) (mcpServers, error) {
	servers, err := mcpproxy.ParseServers(raw)
	if err != nil {
		return nil, err
	}
	p, err := mcpproxy.New(servers, mcpproxy.Env{Sandbox: s.h.ID(), LogDir: s.h.Dir(), Protected: protected,
		Ask: ask, Audit: s.record, Exe: s.guestExe})
	if err != nil {
		return nil, err
	}
	return p, nil
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

// KubePod is where a kubernetes sandbox runs.
type KubePod struct {
	Pod  string `json:"pod"` // namespace/name
	Node string `json:"node,omitempty"`
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

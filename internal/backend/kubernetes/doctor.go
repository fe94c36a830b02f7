package kubernetes

import (
	"context"
	"fmt"
	"strings"
)

// Check is `airlock doctor`'s row for the kubernetes backend: whether a
// cluster is reachable with the kubeconfig, and which RuntimeClass its
// Pods would run with. ok is false when the backend cannot be used.
func Check(ctx context.Context, o Options) (ok bool, detail, impact string) {
	if !haveKubeconfig() {
		return false, "no kubeconfig (KUBECONFIG, ~/.kube/config)", "--backend kubernetes is unavailable until one names a cluster"
	}
	c, err := Connect(o.Context, o.Namespace)
	if err != nil {
		return false, err.Error(), "--backend kubernetes is unavailable"
	}
	names, err := c.RuntimeClasses(ctx)
	if err != nil {
		return false, c.apiError("list RuntimeClasses", err).Error(), "--backend kubernetes is unavailable"
	}
	where := fmt.Sprintf("context %s, namespace %s (%s)", c.Context, c.Namespace, c.Server)
	rc := o.RuntimeClass
	switch {
	case rc != "":
		for _, n := range names {
			if n == rc {
				return true, where + "; RuntimeClass " + rc + " (named in kubernetes.runtime_class)", ""
			}
		}
		return false, where + "; RuntimeClass " + rc + " does not exist (the cluster has: " + list(names) + ")", "every start fails: name one of `kubectl get runtimeclass`"
	case PreferredRuntimeClass(names) != "":
		return true, where + "; RuntimeClass " + PreferredRuntimeClass(names) + " (offered by the cluster, used)", ""
	}
	return true, where + "; no gVisor or Kata RuntimeClass (the cluster has: " + list(names) + ")",
		"Pods run with the node's default runtime and share its kernel; the guest still takes their network and capabilities away"
}

func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// KubeconfigEnv names the admin kubeconfig of the real test cluster
// (.ci/kube-up); .ci/run exports it only when the cluster is up.
const KubeconfigEnv = "AIRLOCK_TEST_KUBECONFIG"

// KubectlEnv names the kubectl to use; without it Kubectl looks beside the
// cluster's cached binaries, then on PATH.
const KubectlEnv = "AIRLOCK_TEST_KUBECTL"

// KubeContainerdEnv names the cluster's containerd socket (.ci/kube-up's
// own, apart from dockerd's), where tests import images.
const KubeContainerdEnv = "AIRLOCK_TEST_KUBE_CONTAINERD"

// Kubeconfig returns the path of the test cluster's kubeconfig, or skips
// the test saying why there is none to use: the variable unset (CI sets it
// when .ci/kube-up brought the cluster up), or the file not readable here
// (the admin credential is root's; the uid 65534 re-run cannot read it).
func Kubeconfig(t testing.TB) string {
	t.Helper()
	p, err := kubeconfig()
	if err != nil {
		t.Skip(err.Error())
	}
	return p
}

func kubeconfig() (string, error) {
	p := os.Getenv(KubeconfigEnv)
	if p == "" {
		return "", fmt.Errorf("no test cluster: %s is unset (run .ci/kube-up as root and export %s=/var/lib/airlock-kube/admin.kubeconfig)", KubeconfigEnv, KubeconfigEnv)
	}
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("no test cluster here: %s: %v", KubeconfigEnv, err)
	}
	f.Close()
	return p, nil
}

// Kubectl returns a kubectl binary for the test cluster ($AIRLOCK_TEST_KUBECTL,
// the one .ci/kube-up built, or PATH's), or skips saying why there is none.
func Kubectl(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(KubectlEnv); p != "" {
		return p
	}
	if m, _ := filepath.Glob("/var/cache/airlock-kube/v*/bin/kubectl"); len(m) > 0 {
		return m[len(m)-1]
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skipf("no kubectl: set %s or run .ci/kube-up", KubectlEnv)
	}
	return p
}

// KubeContainerd returns the test cluster's containerd socket, or skips
// when it is not there or not reachable by this user.
func KubeContainerd(t testing.TB) string {
	t.Helper()
	p := os.Getenv(KubeContainerdEnv)
	if p == "" {
		p = "/run/airlock-kube/containerd/containerd.sock"
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no containerd of the test cluster: %v (set %s)", err, KubeContainerdEnv)
	}
	if os.Geteuid() != 0 {
		t.Skip("importing images into the test cluster's containerd needs root")
	}
	return p
}

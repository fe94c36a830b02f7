package testutil

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// probeSource is the one program in the test image: "exit N" prints a
// line and exits with N; "sleep" waits to be killed (for exec); "dial
// ADDR..." says which addresses take a TCP connection.
const probeSource = `package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

func main() {
	switch os.Args[1] {
	case "exit":
		n, _ := strconv.Atoi(os.Args[2])
		fmt.Println("probe", os.Args[3], "exits", n)
		os.Exit(n)
	case "sleep":
		time.Sleep(time.Hour)
	case "dial":
		for _, a := range os.Args[2:] {
			c, err := net.DialTimeout("tcp", a, 3*time.Second)
			if err != nil {
				fmt.Println(a, "unreachable")
				continue
			}
			c.Close()
			fmt.Println(a, "connected")
		}
	}
}
`

// TestKubernetesTestClusterRunsAPodOfALocalImage shows the cluster of
// .ci/kube-up is a real one: an image built here, imported into its
// containerd, runs as Pods scheduled onto this machine; their exit codes
// come back through the API server, their output lands in the kubelet's
// log files on this host, and an exec through the API server reaches the
// container. The exit-0 Pod is the positive control for the exit-7 one.
func TestKubernetesTestClusterRunsAPodOfALocalImage(t *testing.T) {
	kubeconfig := Kubeconfig(t)
	kubectl := Kubectl(t)
	sock := KubeContainerd(t)
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("ctr not installed (apt-get install containerd)")
	}
	nonce := make([]byte, 6)
	rand.Read(nonce)
	id := hex.EncodeToString(nonce)
	image := "airlock.local/kubeprobe:" + id
	importProbeImage(t, sock, image)

	k := func(args ...string) (string, error) {
		c := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "--request-timeout=20s", "-n", "default"}, args...)...)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		if err != nil {
			return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}
	pod := func(name string, args ...string) string {
		b, _ := json.Marshal(args)
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q,"labels":{"airlock.test/probe":%q}},
"spec":{"restartPolicy":"Never","automountServiceAccountToken":false,"terminationGracePeriodSeconds":0,
"containers":[{"name":"probe","image":%q,"imagePullPolicy":"Never","command":["/probe"],"args":%s,
"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"runAsNonRoot":true,"runAsUser":65534}}]}}`,
			name, id, image, b)
	}
	t.Cleanup(func() {
		k("delete", "pods", "-l", "airlock.test/probe="+id, "--wait=false", "--grace-period=0", "--force")
	})

	host, _ := os.Hostname()
	for _, tc := range []struct {
		name  string
		code  int
		phase string
	}{
		{"probe-ok-" + id, 0, "Succeeded"},
		{"probe-fail-" + id, 7, "Failed"},
	} {
		c := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", "default", "create", "-f", "-")
		c.Stdin = strings.NewReader(pod(tc.name, "exit", fmt.Sprint(tc.code), tc.name))
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("kubectl create %s: %v\n%s", tc.name, err, out)
		}
		if _, err := k("wait", "pod/"+tc.name, "--for=jsonpath={.status.phase}="+tc.phase, "--timeout=90s"); err != nil {
			st, _ := k("get", "pod", tc.name, "-o", "yaml")
			t.Fatalf("%s never reached %s: %v\n%s", tc.name, tc.phase, err, st)
		}
		got, err := k("get", "pod", tc.name, "-o", "jsonpath={.status.containerStatuses[0].state.terminated.exitCode} {.spec.nodeName}")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d %s", tc.code, strings.ToLower(host)); got != want {
			t.Errorf("%s: exit code and node = %q, want %q", tc.name, got, want)
		}
		// Host-side evidence: the kubelet wrote the container's output to
		// a file on this machine.
		uid, err := k("get", "pod", tc.name, "-o", "jsonpath={.metadata.uid}")
		if err != nil {
			t.Fatal(err)
		}
		logs, _ := filepath.Glob(filepath.Join("/var/log/airlock-kube/pods", "default_"+tc.name+"_"+uid, "probe", "*.log"))
		want := fmt.Sprintf("probe %s exits %d", tc.name, tc.code)
		found := false
		for _, l := range logs {
			if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no kubelet log on this host holds %q (files %v)", tc.name, want, logs)
		}
	}

	// exec through the API server and the kubelet: its exit code comes back.
	name := "probe-exec-" + id
	c := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", "default", "create", "-f", "-")
	c.Stdin = strings.NewReader(pod(name, "sleep"))
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("kubectl create %s: %v\n%s", name, err, out)
	}
	if _, err := k("wait", "pod/"+name, "--for=condition=Ready", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	out, err := k("exec", name, "--", "/probe", "exit", "3", "via-exec")
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(out, "probe via-exec exits 3") {
		t.Errorf("kubectl exec: out %q, err %v; want exit status 3 and the probe's line", out, err)
	}
	if out, err := k("exec", name, "--", "/probe", "exit", "0", "via-exec"); err != nil || !strings.Contains(out, "probe via-exec exits 0") {
		t.Errorf("kubectl exec (exit 0): out %q, err %v", out, err)
	}
}

// importProbeImage builds the probe statically and imports it into the
// cluster's containerd as a one-layer docker archive named image (removed
// again at the end of the test).
func importProbeImage(t *testing.T, sock, image string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", "probe", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build probe: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	lw.WriteHeader(&tar.Header{Name: "probe", Mode: 0o755, Size: int64(len(bin)), ModTime: time.Unix(0, 0)})
	lw.Write(bin)
	lw.Close()
	diff := sha256.Sum256(layer.Bytes())
	config := fmt.Sprintf(`{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/probe"]},"rootfs":{"type":"layers","diff_ids":["sha256:%x"]}}`, diff)
	manifest := fmt.Sprintf(`[{"Config":"config.json","RepoTags":[%q],"Layers":["layer.tar"]}]`, image)
	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", []byte(manifest)}, {"config.json", []byte(config)}, {"layer.tar", layer.Bytes()}} {
		aw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)})
		aw.Write(f.data)
	}
	aw.Close()
	imp := exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "import", "-")
	imp.Stdin = &archive
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		exec.Command("ctr", "-a", sock, "-n", "k8s.io", "images", "rm", image).Run()
	})
}

// TestKubernetesTestClusterKeepsItsControlPlaneFromPods: the cluster's
// API server and etcd listen on the host's loopback only, so a Pod on the
// bridge reaches neither, at the node's address or the bridge's gateway;
// the kubelet, which a Pod does reach on the node's address (the positive
// control that the Pod has a way to the host at all), answers nobody
// without a client certificate of the cluster (checked from the host).
func TestKubernetesTestClusterKeepsItsControlPlaneFromPods(t *testing.T) {
	kubeconfig := Kubeconfig(t)
	if kubeconfig != "/var/lib/airlock-kube/admin.kubeconfig" {
		t.Skipf("%s is not the cluster of .ci/kube-up, whose layout this checks", kubeconfig)
	}
	kubectl := Kubectl(t)
	sock := KubeContainerd(t)
	if _, err := exec.LookPath("ctr"); err != nil {
		t.Skip("ctr not installed (apt-get install containerd)")
	}
	kc := func(args ...string) string {
		t.Helper()
		c := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "--request-timeout=20s", "-n", "default"}, args...)...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	node := kc("get", "nodes", "-o", `jsonpath={.items[0].status.addresses[?(@.type=="InternalIP")].address}`)
	if net.ParseIP(node) == nil {
		t.Fatalf("node address %q", node)
	}
	nonce := make([]byte, 6)
	rand.Read(nonce)
	id := hex.EncodeToString(nonce)
	image := "airlock.local/kubeprobe:" + id
	importProbeImage(t, sock, image)

	targets := map[string]string{
		net.JoinHostPort(node, "16443"): "unreachable", // the API server
		"10.244.0.1:16443":              "unreachable", // the same, at the bridge's gateway
		net.JoinHostPort(node, "12379"): "unreachable", // etcd
		"10.96.0.1:443":                 "unreachable", // the kubernetes Service (no kube-proxy)
		net.JoinHostPort(node, "10250"): "connected",   // the kubelet: the positive control
	}
	var addrs []string
	for a := range targets {
		addrs = append(addrs, a)
	}
	b, _ := json.Marshal(append([]string{"dial"}, addrs...))
	name := "probe-dial-" + id
	c := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", "default", "create", "-f", "-")
	c.Stdin = strings.NewReader(fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},
"spec":{"restartPolicy":"Never","automountServiceAccountToken":false,"terminationGracePeriodSeconds":0,
"containers":[{"name":"probe","image":%q,"imagePullPolicy":"Never","command":["/probe"],"args":%s,
"securityContext":{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"runAsNonRoot":true,"runAsUser":65534}}]}}`, name, image, b))
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("kubectl create: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", "default", "delete", "pod", name, "--wait=false", "--grace-period=0", "--force").Run()
	})
	kc("wait", "pod/"+name, "--for=jsonpath={.status.phase}=Succeeded", "--timeout=90s")
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(kc("logs", name)), "\n") {
		if a, v, ok := strings.Cut(l, " "); ok {
			got[a] = v
		}
	}
	for a, want := range targets {
		if got[a] != want {
			t.Errorf("from a Pod, %s: %q, want %q", a, got[a], want)
		}
	}

	// From the host: the kubelet refuses a caller without a client
	// certificate (TLS verified against the cluster's CA).
	ca, err := os.ReadFile("/var/lib/airlock-kube/pki/ca.crt")
	if err != nil {
		t.Skipf("the cluster's CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no certificate in the cluster's CA file")
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + net.JoinHostPort(node, "10250") + "/pods")
	if err != nil {
		t.Fatalf("kubelet without a client certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("kubelet without a client certificate: %s, want 401", resp.Status)
	}
}

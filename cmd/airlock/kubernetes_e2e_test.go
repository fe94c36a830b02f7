//go:build linux

package main

// Kubernetes backend tests, against the real single-node cluster .ci/kube-up
// brings up (AIRLOCK_TEST_KUBECONFIG names its admin kubeconfig; without it
// they skip saying so). The images come from the local dockerd, imported
// into the cluster's containerd: the sandbox image, and a guest image made
// here from the airlock binary under test (so the guest in the Pod speaks
// exactly this binary's protocol). Isolation is judged from inside a Pod and
// by what arrives on the host: a listener on the node's own address, the
// upstream's request log.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/testutil"
)

const kubeContainerdSock = "/run/airlock-kube/containerd/containerd.sock"

var (
	kubeImagesOnce sync.Once
	kubeGuestImage string
	kubeImagesErr  error
)

// kubeEnv is a test env whose runs use the test cluster.
type kubeEnv struct {
	*env
	kubeconfig, kubectl string
}

// kubeOnly skips without the test cluster, and makes sure its images are
// there.
func kubeOnly(t *testing.T) *kubeEnv {
	t.Helper()
	kc := os.Getenv("AIRLOCK_TEST_KUBECONFIG")
	if kc == "" {
		t.Skip("no test cluster: AIRLOCK_TEST_KUBECONFIG is unset (run .ci/kube-up as root and export AIRLOCK_TEST_KUBECONFIG=/var/lib/airlock-kube/admin.kubeconfig)")
	}
	if f, err := os.Open(kc); err != nil {
		t.Skipf("no test cluster here: %v", err)
	} else {
		f.Close()
	}
	if os.Getuid() != 0 {
		t.Skip("importing images into the test cluster's containerd needs root")
	}
	kubeImagesOnce.Do(func() { kubeGuestImage, kubeImagesErr = kubeImages() })
	if kubeImagesErr != nil {
		t.Fatal(kubeImagesErr)
	}
	kubectl := os.Getenv("AIRLOCK_TEST_KUBECTL")
	if kubectl == "" {
		if m, _ := filepath.Glob("/var/cache/airlock-kube/v*/bin/kubectl"); len(m) > 0 {
			kubectl = m[len(m)-1]
		}
	}
	e := &kubeEnv{env: newEnv(t), kubeconfig: kc, kubectl: kubectl}
	cfg := filepath.Join(e.home, ".config", "airlock")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg, "config.yaml"), []byte("kubernetes:\n  image: "+kubeGuestImage+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Whatever a test leaves in the cluster is deleted (its own state
	// dir's Pods), after newEnv's kill and prune.
	t.Cleanup(func() {
		if pods := e.pods(); pods != "" {
			t.Errorf("pods left in the cluster: %s", pods)
			e.kube("delete", "pods", "--wait=false", "-l", "airlock.dev/sandbox").Run()
		}
	})
	return e
}

// kubeImages builds the guest image from the binary under test (with
// airlock images build --format kubernetes) and imports
// it, with the sandbox image, into the cluster's containerd.
func kubeImages() (string, error) {
	b, err := os.ReadFile(airlockBin)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	img := "airlock/guest:test-" + hex.EncodeToString(sum[:6])
	// The way a user makes it.
	if out, err := exec.Command(airlockBin, "images", "build", "--format", "kubernetes", "--tag", img).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != img {
		return "", fmt.Errorf("airlock images build --format kubernetes: %v: %s", err, out)
	}
	for _, name := range []string{img, testImage} {
		if out, err := exec.Command("sh", "-c", "ctr -a "+kubeContainerdSock+" -n k8s.io images ls -q | grep -qx 'docker.io/"+name+"' || docker save "+name+" | ctr -a "+kubeContainerdSock+" -n k8s.io images import -").CombinedOutput(); err != nil {
			return "", fmt.Errorf("import %s into the cluster: %v: %s", name, err, out)
		}
	}
	return img, nil
}

func (e *kubeEnv) environ(extra ...string) []string {
	return append(e.env.environ(extra...), "KUBECONFIG="+e.kubeconfig)
}

// krun runs airlock with the cluster's kubeconfig; a run gets --backend
// kubernetes.
func (e *kubeEnv) krun(args ...string) result {
	e.t.Helper()
	return e.runCmd(e.kcmd(args...))
}

func (e *kubeEnv) kcmd(args ...string) *exec.Cmd {
	if len(args) > 0 && args[0] == "run" {
		args = append([]string{"run", "--backend", "kubernetes"}, args[1:]...)
	}
	c := exec.Command(airlockBin, args...)
	c.Env = e.environ()
	c.Dir = e.ws
	return c
}

func (e *kubeEnv) kube(args ...string) *exec.Cmd {
	if e.kubectl == "" {
		e.t.Skip("no kubectl: set AIRLOCK_TEST_KUBECTL")
	}
	c := exec.Command(e.kubectl, args...)
	c.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	return c
}

// pods lists the Pods of this env's state dir, as NAME=PHASE, by label.
func (e *kubeEnv) pods() string {
	e.t.Helper()
	sum := sha256.Sum256([]byte(e.state))
	out, err := e.kube("get", "pods", "-A", "-l", "airlock.dev/state="+hex.EncodeToString(sum[:10]), "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.phase} {end}").CombinedOutput()
	if err != nil {
		e.t.Fatalf("kubectl get pods: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestKubeRunUname(t *testing.T) {
	e := kubeOnly(t)
	r := e.krun("run", "-q", "--", "uname", "-a")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Linux airlock-") {
		t.Fatalf("run uname -a: %v", r)
	}
	for _, c := range []int{0, 3, 42} {
		if r := e.krun("run", "-q", "--", "sh", "-c", fmt.Sprintf("exit %d", c)); r.code != c {
			t.Errorf("exit %d: got %v", c, r)
		}
	}
	if r := e.krun("run", "-q", "--", "no-such-command"); r.code != 127 {
		t.Errorf("a missing command: %v", r)
	}
	if pods := e.pods(); pods != "" {
		t.Errorf("pods left after the runs: %s", pods)
	}
	// doctor names the cluster and the runtime its Pods get.
	if r := e.krun("doctor"); !strings.Contains(r.stdout, "kubernetes backend") || !strings.Contains(r.stdout, "namespace default") || !strings.Contains(r.stdout, "RuntimeClass") {
		t.Errorf("doctor: %v", r)
	}
}

// nodeIP is the cluster node's InternalIP, an address of this machine.
func (e *kubeEnv) nodeIP() string {
	out, err := e.kube("get", "nodes", "-o", "jsonpath={.items[0].status.addresses[?(@.type==\"InternalIP\")].address}").Output()
	ip := strings.TrimSpace(string(out))
	if err != nil || net.ParseIP(ip) == nil {
		e.t.Fatalf("node address: %q, %v", out, err)
	}
	return ip
}

// canary listens on addr and counts the connections it gets.
func canary(t *testing.T, addr string) (port string, got *atomic.Int32) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = &atomic.Int32{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			got.Add(1)
			io.WriteString(c, "canary\n")
			c.Close()
		}
	}()
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, got
}

// TestKubeOnlyWayOutIsTheGateway checks from inside a Pod of the cluster:
// no interface but lo, no route, no capability, no DNS, neither the API
// server's service address nor the node reachable, while an allowed host
// through the gateway answers and gets the real secret. The node's own
// canary proves a plain Pod does reach it (the positive control), and that
// the sandbox's attempt never arrived.
func TestKubeOnlyWayOutIsTheGateway(t *testing.T) {
	e := kubeOnly(t)
	u := testUpstream(t)
	ip := e.nodeIP()
	port, got := canary(t, net.JoinHostPort(ip, "0"))
	// The positive control: a plain Pod of the same image reaches it.
	name := fmt.Sprintf("airlock-control-%d", time.Now().UnixNano()%1e6)
	out, err := e.kube("run", name, "--rm", "-i", "--restart=Never", "--image="+testImage, "--image-pull-policy=Never", "--quiet",
		"--", "sh", "-c", "curl -s -m 5 --http0.9 http://"+net.JoinHostPort(ip, port)+"/ || echo FAILED").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "canary") {
		t.Fatalf("a plain Pod cannot reach the node's canary, so its absence below would prove nothing: %v: %s", err, out)
	}
	before := got.Load()
	script := `set +e
echo "ifaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
echo "routes: $(tail -n +2 /proc/net/route | wc -l) $(tail -n +1 /proc/net/ipv6_route 2>/dev/null | grep -vc ' lo$')"
grep -E '^Cap(Prm|Eff|Bnd|Amb|Inh)' /proc/self/status | tr '\t' ' '
getent hosts kubernetes.default.svc.cluster.local >/dev/null; echo "dns: $?"
curl -s -m 5 -o /dev/null --noproxy '*' -k https://10.96.0.1/; echo "apiserver: $?"
curl -s -m 5 -o /dev/null --http0.9 --noproxy '*' http://` + net.JoinHostPort(ip, port) + `/; echo "node: $?"
ls /var/run/secrets/kubernetes.io 2>/dev/null | wc -l | sed 's/^/sa: /'
curl -sS -H "Authorization: Bearer $API_TOKEN" https://example.com/k8s-secret
curl -s -o /dev/null -w "refused: %{http_connect} %{exitcode}\n" https://other.test/ 2>/dev/null
true
`
	c := e.kcmd(append(u.flags("--allow-host", "example.com", "--secret", "API_TOKEN@example.com"), "--", "sh", "-c", script)...)
	c.Env = append(c.Env, "API_TOKEN=real-kube-secret-42")
	r := e.runCmd(c)
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	want := []string{
		"ifaces: lo \n", "routes: 0 0\n",
		"CapPrm: 0000000000000000", "CapEff: 0000000000000000", "CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "CapInh: 0000000000000000",
		"dns: 2\n", "apiserver: 7\n", "node: 7\n", "sa: 0\n",
		// The upstream echoes what it got; the gateway swaps the value back.
		"echo Bearer airlock-ph-", "refused: 403 56\n",
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("inside the Pod: want %q in:\n%s\n%s", w, r.stdout, r.stderr)
		}
	}
	if n := got.Load() - before; n != 0 {
		t.Errorf("the node's canary got %d connections from the sandbox", n)
	}
	if log := u.received(t); !strings.Contains(log, "GET /k8s-secret Bearer real-kube-secret-42") {
		t.Errorf("the upstream did not get the swapped secret: %s", log)
	}
	if strings.Contains(r.stdout, "real-kube-secret-42") {
		t.Errorf("the secret's value is inside: %s", r.stdout)
	}
}

// TestKubeSecretNeverInThePod checks that the Pod's spec and the sandbox's
// environment hold the placeholder, never the value.
func TestKubeSecretNeverInThePod(t *testing.T) {
	e := kubeOnly(t)
	u := testUpstream(t)
	c := e.kcmd(append(u.flags("-d", "--allow-host", "example.com", "--secret", "API_TOKEN@example.com"), "--", "sleep", "300")...)
	c.Env = append(c.Env, "API_TOKEN=real-kube-secret-77")
	r := e.runCmd(c)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("run -d: %v", r)
	}
	spec, err := e.kube("get", "pod", "airlock-"+id, "-o", "yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get pod: %v: %s", err, spec)
	}
	if strings.Contains(string(spec), "real-kube-secret-77") {
		t.Error("the secret's value is in the Pod's spec")
	}
	r = e.krun("exec", id, "--", "sh", "-c", "echo $API_TOKEN; cat /proc/1/environ 2>&1 | tr '\\0' '\\n' | grep -c real-kube || true")
	if r.code != 0 || strings.Contains(r.stdout, "real-kube-secret-77") || !strings.Contains(r.stdout, "airlock") {
		t.Errorf("inside: %v", r)
	}
	if r := e.krun("kill", id); r.code != 0 {
		t.Errorf("kill: %v", r)
	}
}

func TestKubeWorkspaceRoundTrip(t *testing.T) {
	e := kubeOnly(t)
	for name, body := range map[string]string{"keep.txt": "kept\n", "edit.txt": "old\n", "gone.txt": "bye\n", "sub/deep.txt": "deep\n"} {
		p := filepath.Join(e.ws, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := e.krun("run", "-q", "--auto-apply", "--apply-risky", "--", "sh", "-c", "pwd; cat sub/deep.txt; echo new > edit.txt; rm gone.txt; mkdir -p made/dir && echo made > made/dir/f; chmod +x made/dir/f")
	if r.code != 0 || !strings.Contains(r.stdout, e.ws+"\ndeep\n") {
		t.Fatalf("run: %v", r)
	}
	check := func(name, want string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(e.ws, name))
		if want == "" {
			if err == nil {
				t.Errorf("%s is still on the host", name)
			}
			return
		}
		if string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	check("keep.txt", "kept\n")
	check("edit.txt", "new\n")
	check("gone.txt", "")
	check("made/dir/f", "made\n")
	if st, err := os.Stat(filepath.Join(e.ws, "made/dir/f")); err != nil || st.Mode()&0o100 == 0 {
		t.Errorf("made/dir/f lost its mode: %v %v", st, err)
	}
	// Without --auto-apply the changes wait for review: the host is untouched.
	r = e.krun("run", "--", "sh", "-c", "echo changed > keep.txt")
	_, id, _ := strings.Cut(r.stderr, "airlock diff ")
	id, _, _ = strings.Cut(id, ";")
	if r.code != 0 || id == "" {
		t.Fatalf("run: %v", r)
	}
	check("keep.txt", "kept\n")
	if r := e.krun("diff", id); !strings.Contains(r.stdout, "keep.txt") || !strings.Contains(r.stdout, "+changed") {
		t.Errorf("diff: %v", r)
	}
	if r := e.krun("apply", "--yes", id); r.code != 0 {
		t.Errorf("apply: %v", r)
	}
	check("keep.txt", "changed\n")
}

func TestKubeDetachedExecKillLs(t *testing.T) {
	e := kubeOnly(t)
	r := e.krun("run", "-d", "--", "sleep", "300")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("run -d: %v", r)
	}
	if r := e.krun("exec", id, "--", "sh", "-c", "echo from-exec; exit 5"); r.code != 5 || r.stdout != "from-exec\n" {
		t.Errorf("exec: %v", r)
	}
	node, _ := e.kube("get", "nodes", "-o", "jsonpath={.items[0].metadata.name}").Output()
	if r := e.krun("ls"); !strings.Contains(r.stdout, "POD") || !strings.Contains(r.stdout, "default/airlock-"+id+"  "+string(node)) {
		t.Errorf("ls does not show the Pod and its node %s: %v", node, r)
	}
	if p := e.pods(); !strings.Contains(p, "airlock-"+id+"=Running") {
		t.Errorf("pods: %q", p)
	}
	if r := e.krun("kill", id); r.code != 0 {
		t.Errorf("kill: %v", r)
	}
	waitNoPods(t, e)
}

func waitNoPods(t *testing.T, e *kubeEnv) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := e.pods()
		if p == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods left: %s", p)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func TestKubeTimeout(t *testing.T) {
	e := kubeOnly(t)
	start := time.Now()
	r := e.krun("run", "-q", "--timeout", "3s", "--", "sleep", "60")
	if r.code != 124 || time.Since(start) > 40*time.Second {
		t.Errorf("run --timeout 3s: %v after %s", r, time.Since(start))
	}
}

// TestKubeCrashedSupervisorsPodIsPruned kills a detached sandbox's
// supervisor outright: its Pod stays in the cluster until prune finds it
// by label.
func TestKubeCrashedSupervisorsPodIsPruned(t *testing.T) {
	e := kubeOnly(t)
	r := e.krun("run", "-d", "--name", "victim", "--", "sleep", "300")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("run -d: %v", r)
	}
	var got struct {
		PID int `json:"pid"`
	}
	json.Unmarshal([]byte(e.krun("get", "victim").stdout), &got)
	if got.PID == 0 {
		t.Fatal("no supervisor pid")
	}
	syscall.Kill(got.PID, syscall.SIGKILL)
	testutil.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(e.krun("ls").stdout, "crashed") })
	if p := e.pods(); !strings.Contains(p, "airlock-"+id) {
		t.Fatalf("the crashed supervisor's Pod is already gone (%q): nothing to prune", p)
	}
	if r := e.krun("prune"); r.code != 0 {
		t.Errorf("prune: %v", r)
	}
	waitNoPods(t, e)
}

// TestKubeBadInput: each way a start can fail is one line naming what
// failed and what to do, exit 125, and no Pod left in the cluster.
func TestKubeBadInput(t *testing.T) {
	e := kubeOnly(t)
	dir := t.TempDir()
	unreachable := filepath.Join(dir, "unreachable")
	cfg, err := os.ReadFile(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(unreachable, []byte(replaceServer(string(cfg), "https://127.0.0.1:1")), 0o600)
	forbidden := forbiddenKubeconfig(t, e, dir)
	cases := map[string]struct {
		env   []string
		flags []string
		want  string
	}{
		"no kubeconfig":                   {env: []string{"KUBECONFIG=" + filepath.Join(dir, "none")}, want: "no kubeconfig"},
		"an unreachable API server":       {env: []string{"KUBECONFIG=" + unreachable}, want: "cannot be reached"},
		"a namespace that is absent":      {flags: []string{"--kube-namespace", "no-such-ns"}, want: `namespace "no-such-ns" does not exist`},
		"a forbidden namespace":           {env: []string{"KUBECONFIG=" + forbidden}, want: "forbidden in namespace"},
		"an image not on the node":        {flags: []string{"--image", "airlock/no-such-image:1"}, want: "cannot be pulled"},
		"a context not in the kubeconfig": {flags: []string{"--kube-context", "elsewhere"}, want: `context "elsewhere"`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := e.kcmd(append(append([]string{"run", "-q"}, c.flags...), "--", "true")...)
			cmd.Env = append(cmd.Env, c.env...)
			r := e.runCmd(cmd)
			checkBadInput(t, r, c.want)
		})
	}
	t.Run("a RuntimeClass that does not exist", func(t *testing.T) {
		writeKubeConfig(t, e, "  runtime_class: no-such-class\n")
		checkBadInput(t, e.krun("run", "-q", "--", "true"), `RuntimeClass "no-such-class" does not exist`)
	})
	t.Run("a Pod that never becomes ready", func(t *testing.T) {
		writeKubeConfig(t, e, "  ready_timeout: 5s\n  node_selector: [airlock.dev/no-such-node=x]\n")
		checkBadInput(t, e.krun("run", "-q", "--", "true"), "did not start within 5s")
	})
	writeKubeConfig(t, e, "")
	if p := e.pods(); p != "" {
		t.Errorf("pods left: %s", p)
	}
	// The positive control: the same env runs.
	if r := e.krun("run", "-q", "--", "true"); r.code != 0 {
		t.Errorf("the same env without the bad input: %v", r)
	}
}

func checkBadInput(t *testing.T, r result, want string) {
	t.Helper()
	t.Log(strings.TrimSpace(r.stderr))
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 125 || len(lines) != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("want exit 125 and one line with %q: %v", want, r)
	}
}

func writeKubeConfig(t *testing.T, e *kubeEnv, extra string) {
	t.Helper()
	p := filepath.Join(e.home, ".config", "airlock", "config.yaml")
	if err := os.WriteFile(p, []byte("kubernetes:\n  image: "+kubeGuestImage+"\n"+extra), 0o644); err != nil {
		t.Fatal(err)
	}
}

func replaceServer(cfg, server string) string {
	var out []string
	for _, l := range strings.Split(cfg, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "server:") {
			l = l[:strings.Index(l, "server:")] + "server: " + server
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// forbiddenKubeconfig is a kubeconfig of a user the cluster knows (a client
// certificate its CA signed) and has granted nothing.
func forbiddenKubeconfig(t *testing.T, e *kubeEnv, dir string) string {
	t.Helper()
	pki := "/var/lib/airlock-kube/pki"
	ca, key := filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key")
	if _, err := os.Stat(key); err != nil {
		t.Skipf("the cluster's CA key is not at %s: %v", key, err)
	}
	k, csr, crt := filepath.Join(dir, "u.key"), filepath.Join(dir, "u.csr"), filepath.Join(dir, "u.crt")
	for _, args := range [][]string{
		{"genrsa", "-out", k, "2048"},
		{"req", "-new", "-key", k, "-subj", "/CN=airlock-test-nobody/O=airlock-test", "-out", csr},
		{"x509", "-req", "-in", csr, "-CA", ca, "-CAkey", key, "-CAcreateserial", "-CAserial", filepath.Join(dir, "ca.srl"), "-days", "1", "-out", crt},
	} {
		if out, err := exec.Command("openssl", args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v: %s", args, err, out)
		}
	}
	p := filepath.Join(dir, "forbidden")
	cp := exec.Command("cp", e.kubeconfig, p)
	if out, err := cp.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, args := range [][]string{
		{"config", "--kubeconfig", p, "set-credentials", "nobody", "--client-certificate", crt, "--client-key", k, "--embed-certs"},
		{"config", "--kubeconfig", p, "set-context", "--current", "--user", "nobody"},
	} {
		if out, err := e.kube(args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %v: %v: %s", args, err, out)
		}
	}
	return p
}

// TestKubeGuestPortsServeNothingInside: the guest's control listener is
// closed once the host connected, and what connects to the relay's back
// door from inside, without the token the plan carried, is dropped: junk
// sent there reaches no gateway, is paired with no door connection, and the
// door works after.
func TestKubeGuestPortsServeNothingInside(t *testing.T) {
	e := kubeOnly(t)
	u := testUpstream(t)
	script := `set +e
python3 - <<'PY'
import socket
for port in (7070, 7071):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        try:
            got = s.recv(100)
        except socket.timeout:
            got = b"(nothing)"
        print(port, "open", got)
    except OSError as e:
        print(port, "refused", e.errno)
PY
for i in 1 2 3 4 5 6 7 8; do curl -sS https://example.com/after-probe-$i; done
`
	r := e.krun(append(u.flags("--allow-host", "example.com"), "--", "sh", "-c", script)...)
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	if !strings.Contains(r.stdout, "7070 refused") {
		t.Errorf("the guest's control port answers inside: %v", r)
	}
	if strings.Contains(r.stdout, "7071 open b'HTTP") {
		t.Errorf("a connection to the back door from inside reached the gateway: %v", r)
	}
	// More requests than the host keeps idle streams: none is paired with
	// the probe's connection.
	if strings.Count(r.stdout, "echo \n") != 8 || !strings.Contains(u.received(t), "GET /after-probe-8") {
		t.Errorf("the door does not work after the probe: %v", r)
	}
}

// TestKubeThroughTheRPC creates a kubernetes sandbox with airlock rpc, runs
// a command in its Pod and writes and reads a file there.
func TestKubeThroughTheRPC(t *testing.T) {
	e := kubeOnly(t)
	c := e.kcmd("rpc")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	dec := json.NewDecoder(out)
	call := func(id int, method, params string) map[string]any {
		t.Helper()
		fmt.Fprintf(in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", id, method, params)
		for {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("%s: %v", method, err)
			}
			if m["id"] == float64(id) {
				if m["error"] != nil {
					t.Fatalf("%s: %v", method, m["error"])
				}
				return m["result"].(map[string]any)
			}
		}
	}
	call(1, "create", `{"backend":"kubernetes","kubernetes":{"image":"`+kubeGuestImage+`"}}`)
	r := call(2, "exec", `{"command":"uname -n; pwd; echo from-pod > f"}`)
	if r["exit_code"] != float64(0) || !strings.Contains(decodeB64(t, r["stdout"]), "airlock-") {
		t.Errorf("exec: %v", r)
	}
	if r := call(3, "read_file", `{"path":"/workspace/f"}`); decodeB64(t, r["content"]) != "from-pod\n" {
		t.Errorf("read_file: %v", r)
	}
	call(4, "close", `{}`)
	in.Close()
	waitNoPods(t, e)
}

func decodeB64(t *testing.T, v any) string {
	s, _ := v.(string)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Errorf("base64 %q: %v", s, err)
	}
	return string(b)
}

// TestKubeInterruptedStartLeavesNothing interrupts runs while their Pods
// are being made, scheduled and connected to: nothing may stay in the
// cluster.
func TestKubeInterruptedStartLeavesNothing(t *testing.T) {
	e := kubeOnly(t)
	if r := e.krun("prune"); r.code != 0 {
		t.Fatalf("airlock prune: %v", r)
	}
	for _, delay := range []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, 1200 * time.Millisecond} {
		c := e.kcmd("run", "--", "sleep", "30")
		var stderr lockedBuffer
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		c.Process.Signal(syscall.SIGINT)
		err := c.Wait()
		// 125: interrupted while starting; 130: started, and the signal
		// reached the command.
		if ee, ok := err.(*exec.ExitError); !ok || (ee.ExitCode() != 125 && ee.ExitCode() != 130) {
			t.Errorf("after %s: %v, stderr %q", delay, err, stderr.String())
		}
		if p := e.pods(); p != "" {
			// Deletion is asked for at once; the kubelet may take a moment.
			waitNoPods(t, e)
		}
	}
}

// kubeEnvOf is what a run of the generic suite needs on the kubernetes
// backend (see TestKubeBackend): the cluster's kubeconfig, and the guest
// image named in e's config.
func kubeEnvOf(e *env) []string {
	cfg := filepath.Join(e.home, ".config", "airlock", "config.yaml")
	if _, err := os.Stat(cfg); err != nil {
		os.MkdirAll(filepath.Dir(cfg), 0o755)
		os.WriteFile(cfg, []byte("kubernetes:\n  image: "+os.Getenv("AIRLOCK_TEST_KUBE_GUEST_IMAGE")+"\n"), 0o644)
	}
	return []string{"KUBECONFIG=" + os.Getenv("AIRLOCK_TEST_KUBECONFIG")}
}

// kubeSuite are the generic suite's sandbox cases TestKubeBackend runs
// again on the kubernetes backend.
var kubeSuite = []string{
	"TestRunsCommandAndPropagatesExitStatus", "TestNoPrivilegeInside", "TestDetachedLifecycle", "TestDetachedLogsKeepOutput",
	"TestSignalsReachTheCommand", "TestTimeoutStopsTheSandbox", "TestEnvironmentKeepsSecretsOut", "TestPTYRunsInteractiveShell",
	"TestClientsInsideReachAllowedHostsThroughTheGateway", "TestSecretsNeverEnterTheSandbox", "TestHostNetworkInterfacesAreInvisible",
	"TestWorkspaceCopyModeExcludesAndCopiesBack", "TestWorkspaceDiscard",
}

// TestKubeBackend re-runs kubeSuite with every `airlock run` on the
// kubernetes backend, as root (the cluster's admin kubeconfig is root's).
func TestKubeBackend(t *testing.T) {
	if testBackend() != "" {
		t.Skip("this is the re-run")
	}
	kubeOnly(t)
	u := testUpstream(t)
	c := exec.Command(os.Args[0], "-test.run", "^("+strings.Join(kubeSuite, "|")+")$", "-test.count=1", "-test.v")
	c.Env = append(os.Environ(), append([]string{"AIRLOCK_TEST_BIN=" + airlockBin, "AIRLOCK_TEST_BACKEND=kubernetes",
		"AIRLOCK_TEST_KUBE_GUEST_IMAGE=" + kubeGuestImage}, u.childEnv(t)...)...)
	out, err := c.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "--- ") || strings.Contains(l, "_test.go:") {
			t.Log(l)
		}
	}
	if err != nil {
		t.Errorf("the suite on the kubernetes backend: %v", err)
	}
}

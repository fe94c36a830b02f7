package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func testPod() *corev1.Pod {
	return podSpec(PodConfig{
		ID: "0123456789ab", Namespace: "ns", StateRoot: "/var/lib/airlock", Image: "airlock/minimal:latest",
		GuestImage: DefaultGuestImage, Hostname: "airlock-01234567", Workspace: "/src/proj", Home: "/root",
		RW: []string{"/tmp/x", "/opt/cache"}, TmpBytes: 1 << 30, MemoryBytes: 2 << 30, CPUs: 1.5,
		Labels: map[string]string{"team": "a"}, NodeSelector: map[string]string{"pool": "sandboxes"},
	})
}

func TestPodSpecIsHardened(t *testing.T) {
	p := testPod()
	s := p.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}
	if s.HostNetwork || s.HostPID || s.HostIPC || (s.HostUsers != nil && *s.HostUsers) {
		t.Error("a host namespace is shared")
	}
	if s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Error("service links put the cluster's services in the environment")
	}
	for _, v := range s.Volumes {
		if v.EmptyDir == nil {
			t.Errorf("volume %s is not an emptyDir: %+v", v.Name, v.VolumeSource)
		}
	}
	if s.SecurityContext.SeccompProfile == nil || s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the Pod's seccomp profile is not RuntimeDefault")
	}
	all := append(append([]corev1.Container(nil), s.InitContainers...), s.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: privilege escalation allowed", c.Name)
			continue
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: the root file system is writable", c.Name)
		}
		if sc.Privileged == nil || *sc.Privileged {
			t.Errorf("%s: privileged", c.Name)
		}
		if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: drops %v, want ALL", c.Name, sc.Capabilities.Drop)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccomp is not RuntimeDefault", c.Name)
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: pull policy %s", c.Name, c.ImagePullPolicy)
		}
	}
	if got := s.InitContainers[0].SecurityContext.Capabilities.Add; len(got) != 0 {
		t.Errorf("the init container adds %v", got)
	}
	// Only what the guest's lockdown needs, which it drops itself.
	if got := s.Containers[0].SecurityContext.Capabilities.Add; !slices.Equal(got, []corev1.Capability{"NET_ADMIN", "SETPCAP"}) {
		t.Errorf("the sandbox container adds %v, want NET_ADMIN and SETPCAP", got)
	}
	if got := s.Containers[0].Command; !slices.Equal(got[:3], []string{guestInside, "guest", "--listen"}) {
		t.Errorf("the sandbox container runs %v, want the guest", got)
	}
	if s.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restart policy %s", s.RestartPolicy)
	}
}

func TestPodSpecShape(t *testing.T) {
	p := testPod()
	if p.Name != "airlock-0123456789ab" || p.Namespace != "ns" {
		t.Errorf("name %s/%s", p.Namespace, p.Name)
	}
	want := map[string]string{LabelSandbox: "0123456789ab", LabelState: StateHash("/var/lib/airlock"), LabelManaged: "airlock", "team": "a"}
	for k, v := range want {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	if p.Spec.NodeSelector["pool"] != "sandboxes" {
		t.Errorf("node selector %v", p.Spec.NodeSelector)
	}
	c := p.Spec.Containers[0]
	if got := c.Resources.Limits.Memory().Value(); got != 2<<30 {
		t.Errorf("memory limit %d", got)
	}
	if got := c.Resources.Limits.Cpu().MilliValue(); got != 1500 {
		t.Errorf("cpu limit %dm", got)
	}
	paths := map[string]bool{}
	for _, m := range c.VolumeMounts {
		paths[m.MountPath] = !m.ReadOnly
	}
	for _, p := range []string{"/tmp", "/src/proj", "/root", "/opt/cache", runInside} {
		if !paths[p] {
			t.Errorf("%s is not a writable emptyDir (mounts %v)", p, paths)
		}
	}
	if w, ok := paths[binInside]; !ok || w {
		t.Errorf("%s is not read-only: %v", binInside, paths)
	}
	if _, ok := paths["/tmp/x"]; ok {
		t.Error("a --rw path under /tmp got a volume of its own")
	}
	// What the scheduler reserves per sandbox stays small, init container
	// included (its requests would default to its limits).
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		if cpu := c.Resources.Requests.Cpu().MilliValue(); cpu == 0 || cpu > 50 {
			t.Errorf("%s requests %dm CPU", c.Name, cpu)
		}
		if mem := c.Resources.Requests.Memory().Value(); mem == 0 || mem > 64<<20 {
			t.Errorf("%s requests %d bytes", c.Name, mem)
		}
	}
	if p.Spec.RuntimeClassName != nil {
		t.Errorf("runtime class %v, none named", *p.Spec.RuntimeClassName)
	}
}

func TestPodStateSaysWhyAPodCannotStart(t *testing.T) {
	waiting := func(name, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
	}
	base := testPod()
	cases := map[string]struct {
		init, main []corev1.ContainerStatus
		phase      corev1.PodPhase
		running    bool
		err        string
	}{
		"an image that cannot be pulled fails at once": {main: []corev1.ContainerStatus{waiting(sandboxName, "ErrImagePull")}, err: "the image cannot be pulled"},
		"an image not on the node fails at once":       {main: []corev1.ContainerStatus{waiting(sandboxName, "ErrImageNeverPull")}, err: "not on the node"},
		"a missing guest image names how to build it":  {init: []corev1.ContainerStatus{waiting(initName, "ImagePullBackOff")}, err: "airlock images build"},
		"a failed init container fails the start": {init: []corev1.ContainerStatus{{Name: initName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}, err: "exited with 1"},
		"what a failed container printed comes as one clean line": {init: []corev1.ContainerStatus{{Name: initName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", Message: "exec format error\n\x1b]0;owned\x07\x1b[2J" + strings.Repeat("x", 5000)}}}}, err: "exec format error ]0;owned"},
		"a Pod still initialising waits":    {init: []corev1.ContainerStatus{waiting(initName, "PodInitializing")}},
		"a running sandbox container is up": {main: []corev1.ContainerStatus{{Name: sandboxName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}, running: true},
		"a Pod that ended fails":            {phase: corev1.PodFailed, err: "ended before its guest started"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := base.DeepCopy()
			p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.Phase = c.init, c.main, c.phase
			running, _, err := podState(p)
			if running != c.running {
				t.Errorf("running = %v", running)
			}
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Errorf("err = %v, want %q", err, c.err)
			}
			if err != nil && (strings.ContainsAny(err.Error(), "\n\x1b\x07") || len(err.Error()) > 600) {
				t.Errorf("err is not one clean, bounded line: %q", err)
			}
		})
	}
}

func TestCheckLabelsRefusesAirlocksOwn(t *testing.T) {
	if err := checkLabels(map[string]string{LabelSandbox: "x"}); err == nil {
		t.Error("a user label took airlock's sandbox label")
	}
	if err := checkLabels(map[string]string{"team": strings.Repeat("a", 64)}); err == nil {
		t.Error("a 64-character label value passed")
	}
	if err := checkLabels(map[string]string{"team": "a"}); err != nil {
		t.Error(err)
	}
}

func TestPreferredRuntimeClass(t *testing.T) {
	if got := PreferredRuntimeClass([]string{"runc", "kata-qemu", "gvisor"}); got != "gvisor" {
		t.Errorf("got %q", got)
	}
	if got := PreferredRuntimeClass([]string{"runc", "nvidia"}); got != "" {
		t.Errorf("got %q", got)
	}
	names, err := runtimeClassNames([]byte(`{"items":[{"metadata":{"name":"gvisor"},"handler":"runsc"}]}`))
	if err != nil || !slices.Equal(names, []string{"gvisor"}) {
		t.Errorf("names %v, %v", names, err)
	}
}

func TestConnectWithoutKubeconfigSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("KUBECONFIG", filepath.Join(dir, "none"))
	_, err := Connect("", "")
	if err == nil || !strings.Contains(err.Error(), "KUBECONFIG") {
		t.Fatalf("err = %v, want one naming KUBECONFIG", err)
	}
	// A context that is not there.
	writeKubeconfig(t, dir, "https://127.0.0.1:1")
	if _, err := Connect("elsewhere", ""); err == nil || !strings.Contains(err.Error(), `context "elsewhere" is not in the kubeconfig`) {
		t.Errorf("err = %v", err)
	}
}

func TestUnreachableAPIServerSaysSo(t *testing.T) {
	dir := t.TempDir()
	writeKubeconfig(t, dir, "https://127.0.0.1:1")
	c, err := Connect("", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "team-a" {
		t.Errorf("namespace %q, want the context's", c.Namespace)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.ListPods(ctx, "x")
	err = c.apiError("list pods", err)
	if !strings.Contains(err.Error(), "cannot be reached") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("err = %v", err)
	}
}

func writeKubeconfig(t *testing.T, dir, server string) {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	cfg := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "` + server + `", insecure-skip-tls-verify: false}
users:
- name: u
  user: {token: "not-a-secret"}
contexts:
- name: here
  context: {cluster: c, user: u, namespace: team-a}
current-context: here
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", p)
}

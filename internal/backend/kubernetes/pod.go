package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels airlock puts on every Pod it makes, so that `airlock ls` and
// `airlock prune` find them without any record (a crashed supervisor's).
const (
	LabelSandbox = "airlock.dev/sandbox" // the sandbox's ID
	LabelState   = "airlock.dev/state"   // StateHash of the state root of the airlock that made it
	LabelManaged = "app.kubernetes.io/managed-by"
)

// Where airlock's own files are inside the Pod.
const (
	runInside   = "/run/airlock"             // an emptyDir: the CA bundle and the like, written by the guest
	binInside   = "/run/airlock/bin"         // an emptyDir, read-only: the binary the init container copied
	guestInside = "/run/airlock/bin/airlock" // the guest, the sandbox container's PID 1
	installPath = "/airlock-bin/airlock"     // where the init container writes it
	guestInImg  = "/airlock"                 // the binary in the guest image
	ctlPort     = 7070                       // the guest's control listener, on the Pod's loopback
	backPort    = 7071                       // the relay's back door (proto.Relay.Back)
	sandboxName = "sandbox"                  // the sandbox container
	initName    = "airlock"                  // the init container
	maxLabel    = 63                         // a label value's length
)

// DefaultGuestImage is the image whose /airlock is the static airlock
// binary (see `airlock images build --format kubernetes`).
const DefaultGuestImage = "airlock/guest:latest"

// PodName is the name of sandbox id's Pod.
func PodName(id string) string { return "airlock-" + id }

// StateHash names a state root in a label value (a path is no label).
func StateHash(stateRoot string) string {
	sum := sha256.Sum256([]byte(stateRoot))
	return hex.EncodeToString(sum[:10])
}

// Selector selects the Pods of stateRoot's sandboxes.
func Selector(stateRoot string) string {
	return LabelSandbox + "," + LabelState + "=" + StateHash(stateRoot)
}

// Options are the cluster's settings, from config's kubernetes section.
type Options struct {
	Context      string            `json:"context,omitempty"`
	Namespace    string            `json:"namespace,omitempty"`
	RuntimeClass string            `json:"runtime_class,omitempty"`
	Image        string            `json:"image,omitempty"` // the guest image (DefaultGuestImage)
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// PodConfig is one sandbox's Pod, as the backend decided it.
type PodConfig struct {
	ID, Namespace, StateRoot string
	Image                    string // the sandbox's root file system
	GuestImage               string
	RuntimeClass             string
	NodeSelector, Labels     map[string]string
	Hostname                 string
	Workspace                string // an emptyDir at this path, filled by upload
	Home                     string // an emptyDir when not under /tmp or the workspace
	RW                       []string
	TmpBytes                 int64
	MemoryBytes              int64
	CPUs                     float64
}

// podSpec is the sandbox's hardened Pod. It does no I/O.
//
// The guest is PID 1 of the one container, which runs as uid 0 with every
// capability dropped but two its lockdown needs and then drops itself
// (proto.Init.Unplug): NET_ADMIN, to delete the Pod's network interfaces
// (the bridge CNI enforces no NetworkPolicy, and a policy would be the
// cluster's to lift), and SETPCAP, to empty the bounding set and lock the
// securebits as a native guest does. allowPrivilegeEscalation false sets
// no_new_privs, so no execve can give a capability back; seccomp is the
// runtime's default and airlock's own filter on top; the root file system
// is the image, read-only; no service account token, no host namespace, no
// host path, no service links. What is writable is emptyDirs: /tmp, the
// home, the workspace (uploaded), --rw paths, and /run/airlock (the guest's
// own files, written before its Landlock).
func podSpec(c PodConfig) *corev1.Pod {
	no, yes := false, true
	root := int64(0)
	zero := int64(0)
	labels := map[string]string{}
	maps.Copy(labels, c.Labels)
	labels[LabelSandbox] = c.ID
	labels[LabelState] = StateHash(c.StateRoot)
	labels[LabelManaged] = "airlock"
	sizeLimit := func() *resource.Quantity {
		if c.TmpBytes <= 0 {
			return nil
		}
		q := resource.NewQuantity(c.TmpBytes, resource.BinarySI)
		return q
	}
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	addDir := func(name, path string, limit bool) {
		ed := &corev1.EmptyDirVolumeSource{}
		if limit {
			ed.SizeLimit = sizeLimit()
		}
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path})
	}
	addDir("run", runInside, false)
	vols = append(vols, corev1.Volume{Name: "bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	mounts = append(mounts, corev1.VolumeMount{Name: "bin", MountPath: binInside, ReadOnly: true})
	addDir("tmp", "/tmp", true)
	addDir("workspace", c.Workspace, false)
	if c.Home != "" && !within(c.Home, "/tmp") && !within(c.Home, c.Workspace) {
		addDir("home", c.Home, true)
	}
	for i, p := range c.RW {
		if within(p, "/tmp") || within(p, c.Workspace) || (c.Home != "" && within(p, c.Home)) {
			continue
		}
		addDir(fmt.Sprintf("rw-%d", i), p, true)
	}
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "SETPCAP"}}
	sc := &corev1.SecurityContext{
		Capabilities:             caps,
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Privileged:               &no,
		RunAsUser:                &root,
		RunAsNonRoot:             &no,
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	initSC := &corev1.SecurityContext{
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
		Privileged:               &no,
		RunAsUser:                &root,
		RunAsNonRoot:             &no,
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}
	if c.MemoryBytes > 0 {
		res.Limits[corev1.ResourceMemory] = *resource.NewQuantity(c.MemoryBytes, resource.BinarySI)
		// Requested is what the scheduler reserves: a little, so that many
		// sandboxes share a node as they share a machine natively.
		res.Requests[corev1.ResourceMemory] = *resource.NewQuantity(min(c.MemoryBytes, 64<<20), resource.BinarySI)
	}
	if c.CPUs > 0 {
		res.Limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(c.CPUs*1000), resource.DecimalSI)
		res.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(min(int64(c.CPUs*1000), 50), resource.DecimalSI)
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: PodName(c.ID), Namespace: c.Namespace, Labels: labels,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &zero,
			Hostname:                      c.Hostname,
			NodeSelector:                  c.NodeSelector,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name: initName, Image: c.GuestImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{guestInImg, "guest", "--install", installPath},
				// Its error, in the Pod's status, names what went wrong.
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				VolumeMounts:             []corev1.VolumeMount{{Name: "bin", MountPath: filepath.Dir(installPath)}},
				SecurityContext:          initSC,
				// Requests of its own, small: without them they would be the
				// limits, and the Pod's request the init container's (a
				// whole half CPU per sandbox: four to a two-core node).
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{
						corev1.ResourceMemory: resource.MustParse("64Mi"), corev1.ResourceCPU: resource.MustParse("500m"),
					},
					Requests: corev1.ResourceList{
						corev1.ResourceMemory: resource.MustParse("16Mi"), corev1.ResourceCPU: resource.MustParse("10m"),
					},
				},
			}},
			Containers: []corev1.Container{{
				Name: sandboxName, Image: c.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:                  []string{guestInside, "guest", "--listen", fmt.Sprintf("127.0.0.1:%d", ctlPort)},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				Args:                     []string{},
				WorkingDir:               "/",
				VolumeMounts:             mounts,
				SecurityContext:          sc,
				Resources:                res,
			}},
			Volumes: vols,
		},
	}
	if c.RuntimeClass != "" {
		rc := c.RuntimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	return pod
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// checkLabels refuses user labels Kubernetes would refuse, and airlock's own.
func checkLabels(l map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if k == LabelSandbox || k == LabelState || k == LabelManaged {
			return fmt.Errorf("kubernetes.labels: %s is airlock's own label", k)
		}
		if len(l[k]) > maxLabel {
			return fmt.Errorf("kubernetes.labels: the value of %s is longer than %d characters", k, maxLabel)
		}
	}
	return nil
}

// runtimeClassNames reads a RuntimeClassList's names.
func runtimeClassNames(b []byte) ([]string, error) {
	var l struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Handler string `json:"handler"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	var out []string
	for _, it := range l.Items {
		out = append(out, it.Metadata.Name)
	}
	return out, nil
}

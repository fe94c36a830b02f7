// Package kubernetes runs a sandbox as a hardened Pod of a Kubernetes
// cluster, reached only through its API server: the guest, airlock's static
// binary copied in by an init container, is the Pod's PID 1 and speaks the
// control protocol over a port-forward stream, deletes the Pod's network
// interfaces and drops every capability before any command runs, and
// relays the proxy door's connections back over port-forward streams to
// the gateway, which stays on the host with the secrets.
package kubernetes

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/airlock-dev/airlock/internal/backend"
	"github.com/airlock-dev/airlock/internal/backend/guestclient"
	"github.com/airlock-dev/airlock/internal/link"
	"github.com/airlock-dev/airlock/internal/proto"
)

// Timeouts of a start: the Pod's scheduling, image and start (bounded so a
// Pod that never becomes ready fails the start), and the guest's setup.
const (
	defaultReadyTimeout = 90 * time.Second
	setupTimeout        = 60 * time.Second
)

// Backend runs sandboxes as Pods of the cluster Options name.
type Backend struct {
	Options Options
	// ReadyTimeout bounds the wait for the Pod to run (default 90s).
	ReadyTimeout time.Duration
}

// Name is "kubernetes".
func (Backend) Name() string { return "kubernetes" }

// Caps: no network link and no host directory inside: the workspace is a
// staged copy, uploaded at the start and brought back at the end.
func (Backend) Caps() backend.Caps {
	return backend.Caps{
		NoLink:     "a kubernetes sandbox reaches the gateway through its proxy door, relayed over the API server",
		NoOverlay:  "the kubernetes backend uploads a copy of the workspace instead; the host is untouched until you apply, as with overlay",
		UsesRunDir: true,
	}
}

// Prepare has nothing to start early: the Pod is created in Start.
func (b Backend) Prepare(context.Context, *backend.Spec) (backend.Pending, error) {
	return pending{b}, nil
}

// Prune deletes the Pods of stateRoot's sandboxes that are not running, in
// the namespace Options name. Without a kubeconfig there is nothing to do.
func (b Backend) Prune(ctx context.Context, stateRoot string, running func(id string) bool) ([]string, error) {
	if !haveKubeconfig() {
		return nil, nil
	}
	c, err := Connect(b.Options.Context, b.Options.Namespace)
	if err != nil {
		return nil, err
	}
	// Every prune asks (a crashed supervisor leaves no record of which
	// cluster it used): a cluster that does not answer soon is not waited for.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return Prune(ctx, c, stateRoot, running)
}

// haveKubeconfig reports whether a kubeconfig is there to read.
func haveKubeconfig() bool {
	if k := os.Getenv("KUBECONFIG"); k != "" {
		return true
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return false
	}
	_, err = os.Stat(home + "/.kube/config")
	return err == nil
}

// Leftover is a Pod airlock made for a sandbox.
type Leftover struct {
	Sandbox, Namespace, Pod, Node, Phase string
}

// List returns the Pods of stateRoot's sandboxes, running or not, in every
// namespace the user may list (else the client's).
func List(ctx context.Context, c *Client, stateRoot string) ([]Leftover, error) {
	pods, err := c.ListAllPods(ctx, Selector(stateRoot))
	if err != nil {
		return nil, c.apiError("list pods", err)
	}
	out := make([]Leftover, 0, len(pods))
	for _, p := range pods {
		out = append(out, Leftover{Sandbox: p.Labels[LabelSandbox], Namespace: p.Namespace, Pod: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase)})
	}
	return out, nil
}

// Prune deletes the Pods of stateRoot's sandboxes that running says are
// not running (a crashed supervisor's), and returns their sandbox IDs.
func Prune(ctx context.Context, c *Client, stateRoot string, running func(id string) bool) ([]string, error) {
	pods, err := List(ctx, c, stateRoot)
	if err != nil {
		return nil, err
	}
	var removed []string
	var firstErr error
	for _, p := range pods {
		if running(p.Sandbox) {
			continue
		}
		if err := c.deletePodIn(ctx, p.Namespace, p.Pod); err != nil {
			if firstErr == nil {
				firstErr = c.apiError("delete pod "+p.Pod, err)
			}
			continue
		}
		removed = append(removed, p.Sandbox)
	}
	return removed, firstErr
}

type pending struct{ b Backend }

func (pending) Close() error { return nil }

// Start creates the sandbox's Pod, waits for it to run, connects to its
// guest through the API server, sends the plan, and uploads the workspace
// copy. On any error the Pod is deleted.
func (p pending) Start(ctx context.Context, spec *backend.Spec, register func(cgroups []string) error, first *backend.Command) (backend.Instance, error) {
	if len(spec.Binds) > 0 || spec.Overlay != nil || spec.Net != nil {
		return nil, errors.New("kubernetes: binds at other paths, an overlay inside and a network link are not supported by the kubernetes backend")
	}
	if spec.WorkspaceSource == "" {
		return nil, errors.New("kubernetes: the workspace must be a copy (--workspace-mode copy): a Pod cannot see a directory of this machine")
	}
	if err := checkLabels(p.b.Options.Labels); err != nil {
		return nil, err
	}
	// A signal while the Pod starts ends the start, which then deletes the
	// Pod: nothing is left behind in the cluster.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	s, err := start(ctx, p.b, spec, register)
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, errors.New("kubernetes: interrupted while the Pod started; it was deleted")
		}
		return nil, err
	}
	return &instance{Sandbox: s, first: backend.Launch(s.client, first)}, nil
}

// Sandbox is one running Pod sandbox.
type Sandbox struct {
	ID       string
	Pod      string
	Node     string
	Warnings []string

	c          *Client
	fw         *forwarder
	ctl        *stream
	conn       *proto.Conn
	client     *guestclient.Client
	relay      *hostRelay
	ws         *syncState // the workspace as uploaded
	relayToken []byte     // opens each back connection (proto.Relay.Token)
	guestImage string
	spec       *backend.Spec
	exited     chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

func start(ctx context.Context, b Backend, spec *backend.Spec, register func([]string) error) (_ *Sandbox, err error) {
	o := b.Options
	c, err := Connect(o.Context, o.Namespace)
	if err != nil {
		return nil, err
	}
	s := &Sandbox{ID: spec.ID, Pod: PodName(spec.ID), c: c, spec: spec, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	rc := o.RuntimeClass
	apiCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if rc != "" {
		ok, err := c.RuntimeClassExists(apiCtx, rc)
		if err != nil {
			return nil, c.apiError("read RuntimeClass "+rc, err)
		}
		if !ok {
			return nil, fmt.Errorf("kubernetes: RuntimeClass %q does not exist in the cluster: name one of `kubectl get runtimeclass`, or leave kubernetes.runtime_class unset", rc)
		}
	} else if names, err := c.RuntimeClasses(apiCtx); err == nil {
		rc = PreferredRuntimeClass(names)
	}
	image := spec.Image
	if image == "" {
		image = "airlock/minimal:latest"
	}
	guestImage := o.Image
	if guestImage == "" {
		guestImage = DefaultGuestImage
	}
	s.guestImage = guestImage
	home := backend.SandboxHome(spec.HostHome)
	pc := PodConfig{
		ID: spec.ID, Namespace: c.Namespace, StateRoot: spec.StateRoot, Image: image, GuestImage: guestImage,
		RuntimeClass: rc, NodeSelector: o.NodeSelector, Labels: o.Labels, Hostname: backend.Hostname(spec.ID),
		Workspace: spec.Workspace, Home: home, RW: spec.RW, TmpBytes: spec.TmpBytes,
		MemoryBytes: spec.Limits.MemoryBytes, CPUs: spec.Limits.CPUs,
	}
	// --pids has no per-Pod field: the node's kubelet podPidsLimit bounds a
	// Pod's processes (see README).
	// Create is not abandoned half-way when ctx ends (a signal): the API
	// server would finish it without us knowing. It runs to completion,
	// then Close deletes what exists.
	createCtx, createCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer createCancel()
	created, err := c.CreatePod(createCtx, podSpec(pc))
	if err != nil {
		return nil, c.apiError("create pod", err)
	}
	s.Pod = created.Name
	if rc != "" && o.RuntimeClass == "" {
		s.Warnings = append(s.Warnings, "kubernetes: the Pod runs with RuntimeClass "+rc+", which the cluster offers")
	}
	if register != nil {
		if err := register(nil); err != nil {
			return nil, err
		}
	}
	ready := b.ReadyTimeout
	if ready == 0 {
		ready = defaultReadyTimeout
	}
	if err := s.waitRunning(ctx, ready); err != nil {
		return nil, err
	}
	setupCtx, setupCancel := context.WithTimeout(ctx, setupTimeout)
	defer setupCancel()
	if s.fw, err = c.dialForward(s.Pod); err != nil {
		return nil, err
	}
	if s.ctl, err = s.connect(setupCtx); err != nil {
		return nil, err
	}
	// The guest's end (its Pod gone, the stream reset) or the API
	// server's is the sandbox's end.
	var endOnce sync.Once
	end := func() { endOnce.Do(func() { close(s.exited) }) }
	s.ctl.onEnd = end
	go func() {
		<-s.fw.Closed()
		end()
	}()
	s.conn = proto.StreamConn(s.ctl)
	if err := s.init(setupCtx, spec); err != nil {
		return nil, err
	}
	s.client = guestclient.New(s.conn)
	if spec.Relay != nil {
		sock := hostSocket(spec)
		if sock == "" {
			return nil, errors.New("kubernetes: the proxy door's socket is not among the sandbox's files")
		}
		s.relay = startHostRelay(s.fw, sock, s.relayToken)
	}
	ws, warnings, err := upload(setupCtx, s.client, spec.WorkspaceSource, spec.Workspace)
	if err != nil {
		return nil, err
	}
	s.ws = ws
	s.Warnings = append(s.Warnings, warnings...)
	return s, nil
}

// hostSocket is the host path of the proxy door's socket (the file shown
// at Relay.Socket on the other backends).
func hostSocket(spec *backend.Spec) string {
	for _, f := range spec.Files {
		if f.Target == spec.Relay.Socket {
			return f.Source
		}
	}
	return ""
}

// waitRunning polls the Pod until its sandbox container runs, or fails the
// start with what went wrong: an image that cannot be pulled, a container
// that cannot be made, a Pod that never becomes ready within timeout.
func (s *Sandbox) waitRunning(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "it was not scheduled"
	for {
		getCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		p, err := s.c.GetPod(getCtx, s.Pod)
		cancel()
		if err != nil {
			return s.c.apiError("read pod "+s.Pod, err)
		}
		s.Node = p.Spec.NodeName
		done, why, err := podState(p)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if why != "" {
			last = why
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubernetes: pod %s did not start within %s (%s): check `kubectl describe pod` while it runs, the node's capacity and kubernetes.node_selector; it was deleted", s.Pod, timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podState reads a Pod's status: running, or why not yet, or the error
// that means it never will.
func podState(p *corev1.Pod) (running bool, why string, err error) {
	fatal := map[string]string{
		"ErrImagePull":               "the image cannot be pulled",
		"ImagePullBackOff":           "the image cannot be pulled",
		"ErrImageNeverPull":          "the image is not on the node",
		"InvalidImageName":           "the image name is invalid",
		"CreateContainerConfigError": "the container's configuration was refused",
		"CreateContainerError":       "the container could not be made",
		"RunContainerError":          "the container could not start",
		"CrashLoopBackOff":           "the container keeps crashing",
	}
	check := func(kind string, st []corev1.ContainerStatus, images map[string]string) error {
		for _, cs := range st {
			if w := cs.State.Waiting; w != nil {
				if what, ok := fatal[w.Reason]; ok {
					hint := "fix --image, or load the image onto the nodes (without a registry: ctr -n k8s.io images import)"
					if cs.Name == initName {
						hint = "build it with `airlock images build --format kubernetes` and load it onto the nodes, or set kubernetes.image"
					}
					return fmt.Errorf("kubernetes: pod %s: %s %s: %s (%s: %s): %s; it was deleted", p.Name, kind, cs.Name, what, images[cs.Name], w.Reason, hint)
				}
			}
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				return fmt.Errorf("kubernetes: pod %s: %s %s exited with %d (%s %s); it was deleted", p.Name, kind, cs.Name, t.ExitCode, t.Reason, oneLine(t.Message))
			}
		}
		return nil
	}
	images := map[string]string{}
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		images[c.Name] = c.Image
	}
	if err := check("init container", p.Status.InitContainerStatuses, images); err != nil {
		return false, "", err
	}
	if err := check("container", p.Status.ContainerStatuses, images); err != nil {
		return false, "", err
	}
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, "", fmt.Errorf("kubernetes: pod %s ended before its guest started (%s %s); it was deleted", p.Name, p.Status.Reason, oneLine(p.Status.Message))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == sandboxName && cs.State.Running != nil {
			return true, "", nil
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			why = c.Reason + ": " + oneLine(c.Message)
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			why = cs.Name + ": " + w.Reason
		}
	}
	return false, why, nil
}

// connect opens the control stream: the guest listens on the Pod's
// loopback once it runs, so a refused stream is retried until ctx ends.
func (s *Sandbox) connect(ctx context.Context) (*stream, error) {
	var lastErr string
	for {
		st, err := s.fw.Open(ctlPort)
		if err != nil {
			return nil, err
		}
		// A refused port shows on the error stream at once; a stream that
		// stays open has reached the guest.
		select {
		case <-st.failed:
			lastErr = st.Err()
		case <-time.After(300 * time.Millisecond):
			return st, nil
		case <-ctx.Done():
			st.Close()
			return nil, fmt.Errorf("kubernetes: the guest in pod %s did not answer within %s (%s)%s", s.Pod, setupTimeout, lastErr, s.logTail())
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("kubernetes: the guest in pod %s did not answer within %s (%s)%s", s.Pod, setupTimeout, lastErr, s.logTail())
		}
	}
}

// init sends the guest its plan and waits for Ready.
func (s *Sandbox) init(ctx context.Context, spec *backend.Spec) error {
	in := &proto.Init{
		Contained: true,
		Unplug:    true,
		Workdir:   spec.Workspace,
		Seccomp:   true,
		Landlock:  backend.Landlock(spec),
		Rlimits:   []proto.Rlimit{{Resource: 4 /* RLIMIT_CORE */}},
	}
	if spec.Relay != nil {
		s.relayToken = make([]byte, 32)
		if _, err := rand.Read(s.relayToken); err != nil {
			return fmt.Errorf("kubernetes: relay token: %w", err)
		}
		in.Relay = &proto.Relay{Listen: spec.Relay.Listen, Back: fmt.Sprintf("127.0.0.1:%d", backPort), Token: s.relayToken}
	}
	files, err := podFiles(spec)
	if err != nil {
		return err
	}
	in.Files = files
	if err := s.conn.Send(&proto.Msg{Op: proto.OpInit, Init: in}); err != nil {
		return fmt.Errorf("kubernetes: send the guest its plan: %w", err)
	}
	ready := make(chan *proto.Msg, 1)
	go func() {
		m, files, err := s.conn.Recv()
		proto.CloseFiles(files)
		if err != nil {
			tail := s.logTail()
			if strings.Contains(tail, "expected init message") {
				// A guest of another airlock build reads the plan otherwise.
				tail += " (the guest image " + s.guestImage + " holds another airlock build: make it from this one with `airlock images build --format kubernetes` and load it onto the nodes)"
			}
			m = &proto.Msg{Op: proto.OpError, Err: &proto.Error{Step: "start", Message: "the guest exited during setup" + tail}}
		}
		ready <- m
	}()
	select {
	case m := <-ready:
		if m.Op != proto.OpReady {
			if m.Err == nil {
				m.Err = &proto.Error{Message: "unexpected " + m.Op.String()}
			}
			return fmt.Errorf("kubernetes: sandbox setup: %w", m.Err)
		}
		s.Warnings = append(s.Warnings, m.Warnings...)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kubernetes: sandbox setup took longer than %s", setupTimeout)
	}
}

// maxPodFiles bounds what the plan carries of the host's files.
const maxPodFiles = 4 << 20

// podFiles are the host's regular files the sandbox sees (the CA bundle),
// their content carried in the plan; those under /run/airlock only (the
// rest of the root is the image's, read-only), and not airlock's binary,
// which the init container put there.
func podFiles(spec *backend.Spec) ([]proto.File, error) {
	var out []proto.File
	total := 0
	for _, f := range spec.Files {
		if !within(f.Target, runInside) || within(f.Target, binInside) {
			continue
		}
		st, err := os.Stat(f.Source)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue // the proxy door's socket: the relay stands in for it
		}
		if total+int(st.Size()) > maxPodFiles {
			return nil, fmt.Errorf("kubernetes: %s is too large to send into the Pod", f.Source)
		}
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		total += len(b)
		out = append(out, proto.File{Path: f.Target, Data: b})
	}
	return out, nil
}

// oneLine is what a Pod says (its containers' output), hostile, as one
// line of at most 300 printable characters.
func oneLine(s string) string {
	clean := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	clean = strings.Join(strings.Fields(clean), " ")
	if len(clean) > 300 {
		clean = strings.ToValidUTF8(clean[:300], "") + "…"
	}
	return clean
}

// logTail is the end of the sandbox container's output (the guest's
// diagnostics), one line, for an error.
func (s *Sandbox) logTail() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msg := oneLine(s.c.LogTail(ctx, s.Pod, sandboxName, 5))
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// Close brings the workspace copy back from the Pod (while its guest still
// serves), then ends the control stream and deletes the Pod. It is safe to
// call twice.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.client != nil && s.ws != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			if err := download(ctx, s.client, s.ws, s.spec.WorkspaceSource); err != nil {
				err = fmt.Errorf("kubernetes: bring the workspace back from pod %s: %w", s.Pod, err)
				// The engine does not wait for Close's error (it may overlap
				// the review): the user must still hear that the copy under
				// review is not all the sandbox made.
				fmt.Fprintf(os.Stderr, "airlock: warning: %v\n", err)
				errs = append(errs, err)
			}
			cancel()
		}
		if s.relay != nil {
			s.relay.Close()
		}
		if s.conn != nil {
			s.conn.Close()
		}
		if s.fw != nil {
			s.fw.Close()
		}
		if s.c != nil && s.Pod != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := s.c.DeletePod(ctx, s.Pod); err != nil {
				errs = append(errs, fmt.Errorf("%w (airlock prune retries)", s.c.apiError("delete pod "+s.Pod, err)))
			}
			cancel()
		}
		if s.spec != nil && s.spec.RunDir != "" {
			os.RemoveAll(s.spec.RunDir)
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// instance is a running Pod as the backend contract sees it.
type instance struct {
	*Sandbox
	first *backend.Launched
}

func (i *instance) Exec(req *proto.Exec, output func(stream uint8, data []byte), files ...*os.File) (*guestclient.Process, error) {
	return i.client.Exec(req, output, files...)
}

func (i *instance) Call(ctx context.Context, m *proto.Msg) (*proto.Msg, error) {
	return i.client.Call(ctx, m)
}

func (i *instance) First() (*guestclient.Process, error) { return i.first.Wait() }
func (i *instance) Warnings() []string                   { return i.Sandbox.Warnings }
func (*instance) Link() *link.Link                       { return nil }
func (i *instance) Done() <-chan struct{}                { return i.exited }
func (*instance) GuestPID() int                          { return 0 }

// OOMKilled is not known from here (the kubelet reports it in the Pod's
// status, which is gone with it).
func (*instance) OOMKilled() bool { return false }

// PreferredRuntimeClass picks, of the cluster's RuntimeClasses, one that
// gives the sandbox a kernel of its own (gVisor, Kata); "" for none.
func PreferredRuntimeClass(names []string) string {
	for _, want := range []string{"gvisor", "runsc", "kata", "kata-qemu", "kata-clh", "kata-fc"} {
		for _, n := range names {
			if n == want {
				return n
			}
		}
	}
	return ""
}

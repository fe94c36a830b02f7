package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is a REST client for core/v1 of one cluster and namespace, as the
// user's kubeconfig names them. It is built on a scheme of core/v1 alone,
// not client-go's clientset: that registers every API group of the cluster
// at every airlock start, and airlock needs Pods.
type Client struct {
	Config    *rest.Config
	Namespace string
	Context   string // the kubeconfig context in use
	Server    string
	rc        *rest.RESTClient
}

// coreScheme knows core/v1 (and metav1's options and Status), nothing else.
func coreScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Connect loads the kubeconfig as kubectl does (KUBECONFIG, else
// ~/.kube/config; context the named one or the current) and makes a
// client for namespace (or the context's, or "default"). It does no I/O
// with the cluster.
func Connect(contextName, namespace string) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: contextName})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: read the kubeconfig: %w; fix it or set KUBECONFIG", err)
	}
	if len(raw.Contexts) == 0 {
		where := "~/.kube/config"
		if k := os.Getenv("KUBECONFIG"); k != "" {
			where = "KUBECONFIG=" + k
		}
		return nil, fmt.Errorf("kubernetes: no kubeconfig with a context (%s): point KUBECONFIG at your cluster's kubeconfig, or set kubernetes.context", where)
	}
	if contextName != "" {
		if _, ok := raw.Contexts[contextName]; !ok {
			return nil, fmt.Errorf("kubernetes: context %q is not in the kubeconfig: name one of `kubectl config get-contexts`", contextName)
		}
	} else {
		contextName = raw.CurrentContext
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: kubeconfig context %q: %w", contextName, err)
	}
	if namespace == "" {
		if namespace, _, err = cc.Namespace(); err != nil || namespace == "" {
			namespace = "default"
		}
	}
	scheme, err := coreScheme()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: scheme: %w", err)
	}
	rcfg := rest.CopyConfig(cfg)
	rcfg.GroupVersion = &corev1.SchemeGroupVersion
	rcfg.APIPath = "/api"
	rcfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rcfg.UserAgent = "airlock"
	if rcfg.Timeout == 0 {
		rcfg.Timeout = 30 * time.Second
	}
	rc, err := rest.RESTClientFor(rcfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: client for %s: %w", cfg.Host, err)
	}
	return &Client{Config: cfg, Namespace: namespace, Context: contextName, Server: cfg.Host, rc: rc}, nil
}

// apiError names what failed talking to the API server and what to do.
func (c *Client) apiError(step string, err error) error {
	var ne net.Error
	var ue *url.Error
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("kubernetes: %s: forbidden in namespace %q (%s): ask for rights to pods, pods/portforward and pods/log there, or set kubernetes.namespace", step, c.Namespace, statusMessage(err))
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("kubernetes: %s: the API server %s did not accept the kubeconfig's credentials: log in again", step, c.Server)
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces"):
		return fmt.Errorf("kubernetes: %s: namespace %q does not exist: create it or set kubernetes.namespace", step, c.Namespace)
	case errors.As(err, &ne) || errors.As(err, &ue):
		return fmt.Errorf("kubernetes: %s: the API server %s cannot be reached (%v): is the cluster up, and the kubeconfig's context (%s) the right one?", step, c.Server, rootCause(err), c.Context)
	}
	return fmt.Errorf("kubernetes: %s: %w", step, err)
}

func statusMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

func rootCause(err error) error {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}

// CreatePod creates p in the client's namespace.
func (c *Client) CreatePod(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.rc.Post().Namespace(c.Namespace).Resource("pods").Body(p).Do(ctx).Into(out)
	return out, err
}

// GetPod reads Pod name.
func (c *Client) GetPod(ctx context.Context, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := c.rc.Get().Namespace(c.Namespace).Resource("pods").Name(name).Do(ctx).Into(out)
	return out, err
}

// DeletePod deletes Pod name at once (no grace period: its guest holds
// nothing to save); a Pod already gone is no error.
func (c *Client) DeletePod(ctx context.Context, name string) error {
	return c.deletePodIn(ctx, c.Namespace, name)
}

func (c *Client) deletePodIn(ctx context.Context, namespace, name string) error {
	zero := int64(0)
	err := c.rc.Delete().Namespace(namespace).Resource("pods").Name(name).
		Body(&metav1.DeleteOptions{GracePeriodSeconds: &zero}).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ListPods lists the namespace's Pods matching the label selector.
func (c *Client) ListPods(ctx context.Context, selector string) ([]corev1.Pod, error) {
	out := &corev1.PodList{}
	err := c.rc.Get().Namespace(c.Namespace).Resource("pods").Param("labelSelector", selector).Do(ctx).Into(out)
	return out.Items, err
}

// ListAllPods lists the Pods matching the label selector in every
// namespace the user may list, else in the client's.
func (c *Client) ListAllPods(ctx context.Context, selector string) ([]corev1.Pod, error) {
	out := &corev1.PodList{}
	err := c.rc.Get().Resource("pods").Param("labelSelector", selector).Do(ctx).Into(out)
	if apierrors.IsForbidden(err) {
		return c.ListPods(ctx, selector)
	}
	return out.Items, err
}

// LogTail is the last lines of a container's output, at most 8 KiB.
func (c *Client) LogTail(ctx context.Context, pod, container string, lines int) string {
	b, err := c.rc.Get().Namespace(c.Namespace).Resource("pods").Name(pod).SubResource("log").
		Param("container", container).Param("tailLines", fmt.Sprint(lines)).Param("limitBytes", "8192").DoRaw(ctx)
	if err != nil {
		return ""
	}
	return string(b)
}

// RuntimeClassExists reports whether the cluster has RuntimeClass name
// (node.k8s.io/v1, read raw: one GET is not worth that group's types).
func (c *Client) RuntimeClassExists(ctx context.Context, name string) (bool, error) {
	err := c.rc.Get().AbsPath("/apis/node.k8s.io/v1/runtimeclasses", name).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// RuntimeClasses lists the cluster's RuntimeClass names.
func (c *Client) RuntimeClasses(ctx context.Context) ([]string, error) {
	b, err := c.rc.Get().AbsPath("/apis/node.k8s.io/v1/runtimeclasses").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	return runtimeClassNames(b)
}

// portForwardURL is pod's portforward subresource.
func (c *Client) portForwardURL(pod string) *url.URL {
	return c.rc.Post().Namespace(c.Namespace).Resource("pods").Name(pod).SubResource("portforward").URL()
}

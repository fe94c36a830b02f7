package mcpproxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/childspec"
	"github.com/airlock-dev/airlock/internal/mcppolicy"
	"github.com/airlock-dev/airlock/internal/secrets"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A Launch makes the command that runs a stdio server. SandboxLaunch (the
// default) runs it in its own airlock sandbox; DirectLaunch runs it as it is,
// for this package's tests.
type Launch func(exe string, s ServerConfig) (*exec.Cmd, error)

// SandboxLaunch runs s in its own airlock sandbox (ChildSpec's), so the
// server has its own network policy and may change only its roots; its
// credentials live in that sandbox's gateway, never the agent's.
func SandboxLaunch(exe string, s ServerConfig) (*exec.Cmd, error) {
	return childspec.Command(context.Background(), exe, ChildSpec(s))
}

// ChildSpec is the spec of s's sandbox: Roots[0] its workspace (the
// current directory without roots), the other roots writable, RO
// read-only, Hide hidden, AllowHosts and Secrets its network, Env set
// inside. It starts from the defaults, never the user's config files:
// they would start this server's own MCP servers (and host commands)
// inside its sandbox, recursively.
func ChildSpec(s ServerConfig) childspec.Spec {
	cs := childspec.New(s.Command...)
	c := &cs.Config
	if len(s.Roots) > 0 {
		c.Workspace.Path = s.Roots[0]
		c.RW = slices.Clone(s.Roots[1:])
	}
	c.RO = slices.Clone(s.RO)
	cs.Hide = slices.Clone(s.Hide)
	c.Network.AllowHosts = slices.Clone(s.AllowHosts)
	c.Network.Secrets = slices.Clone(s.Secrets)
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		c.Env = append(c.Env, k+"="+s.Env[k])
	}
	return cs
}

// hidden is what s's sandbox must not show: the protected paths and the
// paths inside its roots that its rules deny to every tool they could allow
// (see mcppolicy.DeniedToAll), so a path swapped after the check (a symlink
// replaced between policy and the server's open) finds nothing there.
// Paths that hold a root are left out (hiding them would hide the root;
// every call into such a root is denied anyway). What does not exist when
// the server starts cannot be covered; policy still denies it.
func hidden(s ServerConfig, protected []string) []string {
	cands := append([]string(nil), protected...)
	for _, p := range mcppolicy.DeniedToAll(s.Rules) {
		// Only inside a root: that is where a swapped path can lead the
		// server and nowhere else it may go; a deny of /etc must not take
		// /etc from the server's own runtime.
		for _, r := range s.Roots {
			if strings.HasPrefix(p, r+"/") {
				cands = append(cands, p)
				break
			}
		}
	}
	kept := []string{}
	for _, p := range cands {
		p = filepath.Clean(p)
		holds := p == "/" || slices.Contains(kept, p)
		for _, r := range s.Roots {
			holds = holds || r == p || strings.HasPrefix(r, p+"/")
		}
		if !holds {
			kept = append(kept, p)
		}
	}
	return kept
}

// rootsHoldNoProtected refuses a stdio server whose root holds one of
// airlock's own dirs: the server could change them (its sandbox refuses
// such a workspace too, but only once started, in its log); said here, it
// stops the start with the reason.
func rootsHoldNoProtected(s ServerConfig, protected []string) error {
	for _, r := range s.Roots {
		for _, p := range protected {
			p = filepath.Clean(p)
			if p == r || strings.HasPrefix(p, r+"/") || r == "/" {
				return fmt.Errorf("mcpproxy: server %s: root %s holds airlock's own %s, which no server may change; give it a directory that does not hold it", s.Name, r, p)
			}
		}
	}
	return nil
}

// DirectLaunch runs s's command on the host, unsandboxed: tests only.
func DirectLaunch(_ string, s ServerConfig) (*exec.Cmd, error) {
	cmd := exec.Command(s.Command[0], s.Command[1:]...)
	cmd.Env = os.Environ()
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd, nil
}

// Restart backoff: a server that crashes is restarted after 0.5 s, doubling
// to 30 s while it keeps crashing; one that stayed up a minute starts over.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
	stableRun  = time.Minute
)

// upstream is one server's connection, kept up by run.
type upstream struct {
	p    *Proxy
	cfg  ServerConfig
	pol  *mcppolicy.Policy
	srv  *mcp.Server                // what the agent's sessions talk to
	http *mcp.StreamableHTTPHandler // /mcp/NAME

	mu      sync.Mutex
	cs      *mcp.ClientSession
	changed chan struct{} // closed (and replaced) whenever cs changes
	lastErr error
	starts  int
	flights map[*flight]bool // calls in flight, for log messages
}

func (u *upstream) set(cs *mcp.ClientSession, err error) {
	u.mu.Lock()
	u.setLocked(cs, err)
	u.mu.Unlock()
}

func (u *upstream) setLocked(cs *mcp.ClientSession, err error) {
	u.cs = cs
	if err != nil {
		u.lastErr = err
	}
	if cs != nil {
		u.starts++
	}
	close(u.changed)
	u.changed = make(chan struct{})
}

// forget drops cs if it is still the live session: a call saw it end before
// run's Wait did, and the next call must wait for the restart rather than
// be sent down the dead connection.
func (u *upstream) forget(cs *mcp.ClientSession, err error) {
	u.mu.Lock()
	if u.cs == cs {
		u.setLocked(nil, err)
	}
	u.mu.Unlock()
}

// session returns the live connection, waiting for a (re)start until ctx ends.
func (u *upstream) session(ctx context.Context) (*mcp.ClientSession, error) {
	for {
		u.mu.Lock()
		cs, ch, last := u.cs, u.changed, u.lastErr
		u.mu.Unlock()
		if cs != nil {
			return cs, nil
		}
		select {
		case <-ch:
		case <-u.p.ctx.Done():
			return nil, errors.New("the proxy is closed")
		case <-ctx.Done():
			if last != nil {
				return nil, fmt.Errorf("server %s is not running (last error: %v)", u.cfg.Name, last)
			}
			return nil, fmt.Errorf("server %s is not running yet", u.cfg.Name)
		}
	}
}

// run connects and reconnects with backoff until the proxy closes.
func (u *upstream) run() {
	ctx := u.p.ctx
	backoff := minBackoff
	for {
		start := time.Now()
		cs, err := u.connect(ctx)
		if err == nil {
			u.set(cs, nil)
			u.p.notifyAll(u, true) // capabilities and lists may differ from the last run
			err = cs.Wait()
			if err == nil {
				err = errors.New("the server exited")
			}
			u.set(nil, err)
		} else {
			u.set(nil, err)
		}
		if ctx.Err() != nil {
			return
		}
		u.p.lifecycle(u.cfg.Name, "crash", err)
		if time.Since(start) > stableRun {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "airlock-mcpproxy", Version: "1"}, &mcp.ClientOptions{
		// No roots, sampling or elicitation: a server learns its files from its
		// command line, and nothing reaches the agent's client but results.
		Capabilities:               &mcp.ClientCapabilities{},
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { u.p.notify(u, "tools") },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { u.p.notify(u, "prompts") },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { u.p.notify(u, "resources") },
		ProgressNotificationHandler: func(ctx context.Context, r *mcp.ProgressNotificationClientRequest) {
			u.p.progress(ctx, r.Params)
		},
		LoggingMessageHandler: func(ctx context.Context, r *mcp.LoggingMessageRequest) { u.p.log(ctx, u, r.Params) },
		MultiRoundTrip:        &mcp.MultiRoundTripOptions{Disabled: true},
	})
	var t mcp.Transport
	if u.cfg.URL != "" {
		hc, err := remoteClient(u.cfg)
		if err != nil {
			return nil, err
		}
		t = &mcp.StreamableClientTransport{Endpoint: u.cfg.URL, HTTPClient: hc}
	} else {
		cmd, err := u.p.launch(u.p.exe, u.cfg)
		if err != nil {
			return nil, fmt.Errorf("mcpproxy: %s: launch: %w", u.cfg.Name, err)
		}
		defer childspec.Close(cmd) // its spec: the child has its own copy once started
		cmd.Dir = u.cfg.Cwd
		if cmd.Dir == "" && len(u.cfg.Roots) > 0 {
			cmd.Dir = u.cfg.Roots[0]
		}
		if u.p.env.LogDir != "" {
			f, err := os.OpenFile(filepath.Join(u.p.env.LogDir, "mcp-"+u.cfg.Name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return nil, fmt.Errorf("mcpproxy: %s: stderr log: %w", u.cfg.Name, err)
			}
			defer f.Close() // the child has its own copy once started
			fmt.Fprintf(f, "--- %s: starting %s\n", time.Now().Format(time.RFC3339), strings.Join(u.cfg.Command, " "))
			cmd.Stderr = f
		}
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cs, err := client.Connect(cctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: %s: connect: %w", u.cfg.Name, err)
	}
	return cs, nil
}

// startTimeout bounds a server's start and MCP handshake (npx may download).
var startTimeout = 2 * time.Minute

// remoteClient sends the secret as a bearer token: the value is swapped in
// by airlock's secret set at each request, so it appears nowhere else.
func remoteClient(s ServerConfig) (*http.Client, error) {
	if s.Secret == "" {
		return &http.Client{}, nil
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, err
	}
	flag := s.Secret
	if !strings.Contains(flag, "@") {
		flag += "@" + u.Hostname()
	}
	sec, err := secrets.ParseFlag(flag, secrets.DefaultSources())
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: %s: secret: %w", s.Name, err)
	}
	set, err := secrets.NewSet(sec)
	if err != nil {
		return nil, fmt.Errorf("mcpproxy: %s: secret: %w", s.Name, err)
	}
	return &http.Client{Transport: bearer{set: set, placeholder: sec.Placeholder, base: http.DefaultTransport}}, nil
}

type bearer struct {
	set         *secrets.Set
	placeholder string
	base        http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	v, _, err := b.set.SwapHeader(r.URL.Hostname(), "Bearer "+b.placeholder)
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", v)
	return b.base.RoundTrip(r)
}

// Package broker is what the sandbox reaches at airlock.internal: a small
// HTTP mux the gateway serves itself, never dialled out, where the sandbox
// can learn about its own sandbox (GET /v1/info) and where the MCP proxy
// and host commands are mounted.
package broker

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// Info is what GET /v1/info answers: the sandbox's id and a summary of its
// policy. It holds names and rules only; a secret appears by name and hosts,
// and Info has no field that could carry its value.
type Info struct {
	Sandbox string  `json:"sandbox"`
	Network Network `json:"network"`
}

// Network summarises the sandbox's network policy.
type Network struct {
	Mode        string   `json:"mode"`    // transparent or proxy
	Default     string   `json:"default"` // what an unlisted host gets: deny or ask
	AllowHosts  []string `json:"allow_hosts"`
	TunnelHosts []string `json:"tunnel_hosts"` // blind TLS tunnels: not intercepted
	DenyHosts   []string `json:"deny_hosts"`
	Endpoints   []string `json:"endpoints"`
	Secrets     []Secret `json:"secrets"`
}

// Secret is a secret by name: the env var that holds its placeholder inside
// the sandbox and the hosts it is sent to.
type Secret struct {
	Name  string   `json:"name"`
	Hosts []string `json:"hosts"`
}

// Broker routes the sandbox's requests to airlock.internal.
type Broker struct {
	mux *http.ServeMux
	// MaxBody is the most one request's body may carry, for every service
	// (more is refused with 413): the services read bodies whole, and the
	// supervisor's memory must not be the sandbox's to fill.
	MaxBody int64
	// BodyTimeout bounds how long a request's body may take to arrive, so
	// a sandbox trickling bytes holds no handler for long.
	BodyTimeout time.Duration
}

// Defaults for Broker's limits.
const (
	DefaultMaxBody     = 8 << 20
	DefaultBodyTimeout = 30 * time.Second
)

// New returns a broker that serves info at GET /v1/info.
func New(info Info) *Broker {
	b := &Broker{mux: http.NewServeMux(), MaxBody: DefaultMaxBody, BodyTimeout: DefaultBodyTimeout}
	body, err := json.MarshalIndent(tidy(info), "", "  ")
	if err != nil {
		panic("broker: info does not encode: " + err.Error()) // strings and slices only: cannot happen
	}
	body = append(body, '\n')
	b.Handle("GET /v1/info", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	return b
}

// Handle mounts a service at pattern (http.ServeMux syntax, e.g. "/v1/mcp/").
func (b *Broker) Handle(pattern string, h http.Handler) { b.mux.Handle(pattern, h) }

// ServeHTTP implements http.Handler. Every request's body is capped at
// MaxBody and must arrive within BodyTimeout; the read deadline is lifted
// once the body has been read, so a long answer (an approval that waits, an
// event stream) is not cut.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > b.MaxBody {
		http.Error(w, fmt.Sprintf("airlock: request body of %d bytes, over the broker's limit of %d", r.ContentLength, b.MaxBody), http.StatusRequestEntityTooLarge)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		body := &boundedBody{ReadCloser: http.MaxBytesReader(w, r.Body, b.MaxBody)}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(b.BodyTimeout)) == nil {
			body.rc = rc
		}
		r.Body = body
	}
	b.mux.ServeHTTP(w, r)
}

// boundedBody lifts the read deadline when the whole body has arrived. On
// any other error it stays: the server then discards what is left of the
// body before answering, and that must not wait on a trickle either.
type boundedBody struct {
	io.ReadCloser
	rc *http.ResponseController
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.rc != nil {
		b.rc.SetReadDeadline(time.Time{})
		b.rc = nil
	}
	return n, err
}

// tidy drops repeated rules (a secret's hosts are allowed as well as
// listed, so they often repeat an allow rule), keeping the first of each,
// and makes empty lists encode as [] rather than null, so a reader can
// range over every list without checking.
func tidy(i Info) Info {
	n := &i.Network
	for _, l := range []*[]string{&n.AllowHosts, &n.TunnelHosts, &n.DenyHosts, &n.Endpoints} {
		out := []string{}
		for _, s := range *l {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		*l = out
	}
	n.Secrets = append([]Secret{}, n.Secrets...)
	for k := range n.Secrets {
		if n.Secrets[k].Hosts == nil {
			n.Secrets[k].Hosts = []string{}
		}
	}
	return i
}

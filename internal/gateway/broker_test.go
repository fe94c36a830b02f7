package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/broker"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/secrets"
)

const realSecret = "sk-live-real-value-that-never-enters-the-sandbox"

// spyBroker is the real broker behind a record of what reached it.
type spyBroker struct {
	h     http.Handler
	mu    sync.Mutex
	hosts []string
	auth  []string
}

func (s *spyBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hosts = append(s.hosts, r.Host)
	s.auth = append(s.auth, r.Header.Get("Proxy-Authorization"))
	s.mu.Unlock()
	s.h.ServeHTTP(w, r)
}

func (s *spyBroker) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hosts)
}

// brokerFixture is a gateway allowing example.com (an upstream answering
// "upstream" on 80 and 443) with a secret for it and a broker whose info
// is built as the supervisor builds it: names and hosts only.
func brokerFixture(t *testing.T) (*fixture, *spyBroker) {
	t.Helper()
	sec, err := secrets.New("API_KEY", []byte(realSecret), []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := secrets.NewSet(sec)
	spy := &spyBroker{h: broker.New(broker.Info{Sandbox: "sb-test", Network: broker.Network{Mode: "proxy", Default: "deny",
		AllowHosts: []string{"example.com"}, Secrets: []broker.Secret{{Name: sec.Name, Hosts: sec.Hosts}}}})}
	upHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") })
	upTLS := upstreamTLS(t, upHandler)
	upPlain := httptestServer(t, "upstream")
	f := newFixture(t, options{policy: allowExample(), secrets: set, broker: spy, static: map[string]netip.Addr{"example.com": loopback},
		ports: map[uint16]string{443: upTLS.Listener.Addr().String(), 80: upPlain}}, upTLS.Certificate())
	return f, spy
}

// getInfo sends GET /v1/info with host as the Host header over c (TLS
// first when serverName is set) and returns the response.
func getInfo(t *testing.T, f *fixture, c net.Conn, serverName, host string) (*http.Response, string) {
	t.Helper()
	if serverName != "" {
		tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS to %s: %v", serverName, err)
		}
		c = tc
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /v1/info HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func checkInfo(t *testing.T, status int, body string) {
	t.Helper()
	var info broker.Info
	if status != 200 || json.Unmarshal([]byte(body), &info) != nil || info.Sandbox != "sb-test" {
		t.Fatalf("GET /v1/info = %d %q, want 200 with the sandbox id", status, body)
	}
	if len(info.Network.Secrets) != 1 || info.Network.Secrets[0].Name != "API_KEY" || info.Network.Secrets[0].Hosts[0] != "example.com" {
		t.Errorf("secrets in info = %+v, want API_KEY for example.com", info.Network.Secrets)
	}
	if strings.Contains(body, realSecret) {
		t.Fatal("the secret's value is in /v1/info")
	}
}

func TestTheBrokerAnswersThroughBothDoors(t *testing.T) {
	tests := map[string]func(t *testing.T, f *fixture) (int, string){
		"an absolute URI through the proxy": func(t *testing.T, f *fixture) (int, string) {
			resp, err := f.client.Get("http://airlock.internal/v1/info")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(body)
		},
		"CONNECT to port 80": func(t *testing.T, f *fixture) (int, string) {
			c, _ := connectThrough(t, f.proxy, "airlock.internal:80")
			resp, body := getInfo(t, f, c, "", "airlock.internal")
			return resp.StatusCode, body
		},
		"CONNECT to port 443 with the sandbox CA": func(t *testing.T, f *fixture) (int, string) {
			c, _ := connectThrough(t, f.proxy, "airlock.internal:443")
			resp, body := getInfo(t, f, c, "airlock.internal", "airlock.internal")
			return resp.StatusCode, body
		},
		"CONNECT in capitals with the root dot": func(t *testing.T, f *fixture) (int, string) {
			c, _ := connectThrough(t, f.proxy, "AIRLOCK.Internal.:80")
			resp, body := getInfo(t, f, c, "", "Airlock.Internal.:80")
			return resp.StatusCode, body
		},
		"the transparent door on port 80": func(t *testing.T, f *fixture) (int, string) {
			serve := f.gw.Accept(context.Background(), "airlock.internal", 80)
			if serve == nil {
				t.Fatalf("refused: %+v", f.lastRecord("network"))
			}
			resp, body := getInfo(t, f, acceptPair(t, serve), "", "airlock.internal")
			return resp.StatusCode, body
		},
		"the transparent door on port 443": func(t *testing.T, f *fixture) (int, string) {
			serve := f.gw.Accept(context.Background(), "airlock.internal", 443)
			if serve == nil {
				t.Fatalf("refused: %+v", f.lastRecord("network"))
			}
			resp, body := getInfo(t, f, acceptPair(t, serve), "airlock.internal", "airlock.internal")
			return resp.StatusCode, body
		},
	}
	for name, get := range tests {
		t.Run(name, func(t *testing.T) {
			f, spy := brokerFixture(t)
			status, body := get(t, f)
			checkInfo(t, status, body)
			r := waitRecord(t, f, func(r audit.Record) bool { return r.Kind == "http" })
			if r.Host != "airlock.internal" || r.Decision != "allow" || r.Rule != "broker" || r.Status != 200 || r.Path != "/v1/info" || r.Method != "GET" {
				t.Errorf("audit = %+v", r)
			}
			for _, a := range spy.auth {
				if a != "" {
					t.Errorf("the broker saw the proxy credential %q", a)
				}
			}
			log, _ := os.ReadFile(f.auditLog)
			if strings.Contains(string(log), realSecret) {
				t.Fatal("the secret's value is in the audit log")
			}
		})
	}
}

func TestTheBrokerIsReachableByItsNameOnly(t *testing.T) {
	// Each case returns the status it got (0: the TLS handshake failed).
	wantStatus := map[string]int{
		"a Host header naming the broker on an absolute URI to an allowed host goes to that host": 200,
		"SNI naming the broker on a CONNECT to an allowed host":                                   0,
	}
	tests := map[string]func(t *testing.T, f *fixture) int{
		"a Host header naming the broker on a CONNECT to an allowed host goes to that host": func(t *testing.T, f *fixture) int {
			c, _ := connectThrough(t, f.proxy, "example.com:443")
			resp, _ := getInfo(t, f, c, "example.com", "airlock.internal")
			return resp.StatusCode
		},
		"a Host header naming the broker on an absolute URI to an allowed host goes to that host": func(t *testing.T, f *fixture) int {
			// Written raw: Go's client would put req.Host in the request line.
			c := dialFront(t, f.proxy)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET http://example.com/v1/info HTTP/1.1\r\nHost: airlock.internal\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n", b64("airlock:"+token))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "upstream" {
				t.Errorf("body %q, want the upstream's", body)
			}
			return resp.StatusCode
		},
		"a Host header naming the broker on a transparent connection to an allowed host": func(t *testing.T, f *fixture) int {
			serve := f.gw.Accept(context.Background(), "example.com", 80)
			resp, _ := getInfo(t, f, acceptPair(t, serve), "", "airlock.internal")
			return resp.StatusCode
		},
		"SNI naming the broker on a CONNECT to an allowed host": func(t *testing.T, f *fixture) int {
			c, _ := connectThrough(t, f.proxy, "example.com:443")
			tc := tls.Client(c, &tls.Config{ServerName: "airlock.internal", RootCAs: caRoots(f)})
			if tc.Handshake() == nil {
				t.Error("handshake for airlock.internal on example.com's connection succeeded")
			}
			return 0
		},
		"a Host header naming another host on the broker's connection": func(t *testing.T, f *fixture) int {
			c, _ := connectThrough(t, f.proxy, "airlock.internal:80")
			resp, _ := getInfo(t, f, c, "", "example.com")
			return resp.StatusCode
		},
		"a CONNECT to a name under the broker's": func(t *testing.T, f *fixture) int {
			return connectStatus(t, f.proxy, "x.airlock.internal:80")
		},
		"a CONNECT to the broker on another port": func(t *testing.T, f *fixture) int {
			return connectStatus(t, f.proxy, "airlock.internal:8080")
		},
		"a CONNECT to the broker with two root dots": func(t *testing.T, f *fixture) int {
			return connectStatus(t, f.proxy, "airlock.internal..:80")
		},
		"the transparent door to loopback on port 80": func(t *testing.T, f *fixture) int {
			if f.gw.Accept(context.Background(), "127.0.0.1", 80) != nil {
				return 200
			}
			return 403
		},
		"the transparent door to the broker on another port": func(t *testing.T, f *fixture) int {
			if f.gw.Accept(context.Background(), "airlock.internal", 22) != nil {
				return 200
			}
			checkRecord(t, f.lastRecord("network"), "deny", "broker", "serves ports 80 and 443, not 22")
			return 403
		},
	}
	for name, try := range tests {
		t.Run(name, func(t *testing.T) {
			f, spy := brokerFixture(t)
			want, ok := wantStatus[name]
			if !ok {
				want = http.StatusForbidden
			}
			if st := try(t, f); st != want {
				t.Errorf("status %d, want %d", st, want)
			}
			if n := spy.calls(); n != 0 {
				t.Fatalf("the broker was reached %d times (hosts %q)", n, spy.hosts)
			}
		})
	}
}

func TestWithoutABrokerTheNameIsRefused(t *testing.T) {
	f := newFixture(t, options{policy: policy.Config{AllowHosts: []string{"airlock.internal"}, Default: policy.Allow}})
	resp, err := f.client.Get("http://airlock.internal/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403", resp.StatusCode)
	}
	checkRecord(t, f.lastRecord("network"), "deny", "broker", "not served by this gateway (no broker)")
	if f.gw.Accept(context.Background(), "airlock.internal", 80) != nil {
		t.Error("the transparent door accepted")
	}
}

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
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/broker"
)

// The broker's hostile tests: what a sandbox can send airlock.internal
// through either door. Host/SNI tricks are in broker_test.go
// (TestTheBrokerIsReachableByItsNameOnly); these add identity claims, the
// reverse Host/SNI cases, and bodies that are too big or too slow.

// brokerDoor opens a connection to airlock.internal:80 (or 443, over TLS) the
// way a sandbox would through one door; the caller writes one request.
type brokerDoor func(t *testing.T, f *fixture, port uint16) net.Conn

var brokerDoors = map[string]brokerDoor{
	"proxy": func(t *testing.T, f *fixture, port uint16) net.Conn {
		c, _ := connectThrough(t, f.proxy, "airlock.internal:"+strconv.Itoa(int(port)))
		return c
	},
	"transparent": func(t *testing.T, f *fixture, port uint16) net.Conn {
		serve := f.gw.Accept(context.Background(), "airlock.internal", port)
		if serve == nil {
			t.Fatalf("the transparent door refused airlock.internal:%d", port)
		}
		return acceptPair(t, serve)
	},
}

func dialBroker(t *testing.T, f *fixture, d brokerDoor, port uint16) net.Conn {
	t.Helper()
	c := d(t, f, port)
	if port == 443 {
		tc := tls.Client(c, &tls.Config{ServerName: "airlock.internal", RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS to airlock.internal: %v", err)
		}
		c = tc
	}
	return c
}

// TestARequestCannotClaimToBeAnotherSandbox: the broker knows its sandbox
// from the connection (one gateway per sandbox), never from the request:
// headers and a query naming another sandbox change nothing, in /v1/info
// or in the audit record; another sandbox's proxy credential is refused
// before the broker.
func TestARequestCannotClaimToBeAnotherSandbox(t *testing.T) {
	claims := "X-Airlock-Sandbox: sb-other\r\nX-Sandbox-Id: sb-other\r\nForwarded: for=10.0.0.9;by=sb-other\r\n" +
		"X-Forwarded-For: 10.0.0.9\r\nX-Real-IP: 10.0.0.9\r\nCookie: sandbox=sb-other\r\nAuthorization: Bearer sb-other\r\n"
	for name, d := range brokerDoors {
		for _, port := range []uint16{80, 443} {
			t.Run(fmt.Sprintf("%s door, port %d", name, port), func(t *testing.T) {
				f, _ := brokerFixture(t)
				c := dialBroker(t, f, d, port)
				c.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(c, "GET /v1/info?sandbox=sb-other HTTP/1.1\r\nHost: airlock.internal\r\n%sConnection: close\r\n\r\n", claims)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				var info broker.Info
				if resp.StatusCode != 200 || json.Unmarshal(body, &info) != nil || info.Sandbox != "sb-test" {
					t.Fatalf("GET /v1/info claiming sb-other = %d %s, want sb-test's own info", resp.StatusCode, body)
				}
				for _, r := range f.records() {
					if b, _ := json.Marshal(r); r.Sandbox != "test" || strings.Contains(string(b), "sb-other") {
						t.Errorf("audit record not the gateway's own sandbox's (test), or naming the claim: %s", b)
					}
				}
			})
		}
	}
	t.Run("another sandbox's proxy credential", func(t *testing.T) {
		f, spy := brokerFixture(t)
		c := dialFront(t, f.proxy)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://airlock.internal/v1/info HTTP/1.1\r\nHost: airlock.internal\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n", b64("airlock:another-sandboxs-token"))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusProxyAuthRequired || spy.calls() != 0 {
			t.Errorf("status %d, broker reached %d times; want 407 and never", resp.StatusCode, spy.calls())
		}
	})
}

// TestHostAndSNIMismatchesTowardTheBroker: the reverse of
// TestTheBrokerIsReachableByItsNameOnly: on the broker's own connection,
// SNI or a Host header naming another host reaches neither that host nor
// the broker as it; an absolute URI naming the broker is the broker's
// whatever its Host header says (the request line wins, RFC 9112 §3.2.2),
// and one naming another host never reaches the broker.
func TestHostAndSNIMismatchesTowardTheBroker(t *testing.T) {
	t.Run("SNI naming another host on the broker's connection", func(t *testing.T) {
		for name, d := range brokerDoors {
			f, spy := brokerFixture(t)
			c := d(t, f, 443)
			tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: caRoots(f), NextProtos: []string{"http/1.1"}})
			tc.SetDeadline(time.Now().Add(10 * time.Second))
			if err := tc.Handshake(); err == nil {
				fmt.Fprintf(tc, "GET /v1/info HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
				if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err == nil {
					body, _ := io.ReadAll(resp.Body)
					if resp.StatusCode == 200 || strings.Contains(string(body), "upstream") {
						t.Errorf("%s door: SNI example.com on airlock.internal:443 = %d %q", name, resp.StatusCode, body)
					}
				}
			}
			if spy.calls() != 0 {
				t.Errorf("%s door: the broker served a request for example.com", name)
			}
		}
	})
	t.Run("SNI naming the broker on a transparent connection to another host", func(t *testing.T) {
		f, spy := brokerFixture(t)
		serve := f.gw.Accept(context.Background(), "example.com", 443)
		if serve == nil {
			t.Fatal("the control: example.com:443 is allowed, yet refused")
		}
		tc := tls.Client(acceptPair(t, serve), &tls.Config{ServerName: "airlock.internal", RootCAs: caRoots(f)})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if tc.Handshake() == nil {
			t.Error("a handshake for airlock.internal on example.com's connection succeeded")
		}
		if spy.calls() != 0 {
			t.Error("the broker was reached")
		}
	})
	t.Run("an absolute URI naming the broker with another Host", func(t *testing.T) {
		f, spy := brokerFixture(t)
		c := dialFront(t, f.proxy)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://airlock.internal/v1/info HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n", b64("airlock:"+token))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(body), "upstream") {
			t.Fatalf("the request for the broker reached example.com: %s", body)
		}
		checkInfo(t, resp.StatusCode, string(body))
		if spy.hosts[0] != "airlock.internal" {
			t.Errorf("the broker saw Host %q, want airlock.internal", spy.hosts[0])
		}
	})
	t.Run("an absolute URI naming another host with the broker's Host", func(t *testing.T) {
		f, spy := brokerFixture(t)
		c := dialFront(t, f.proxy)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://127.0.0.1/v1/info HTTP/1.1\r\nHost: airlock.internal\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n", b64("airlock:"+token))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusForbidden || spy.calls() != 0 {
			t.Errorf("GET http://127.0.0.1/ with Host airlock.internal = %d, broker reached %d times; want 403 and never", resp.StatusCode, spy.calls())
		}
	})
}

// echoService reads each body whole and counts the bytes.
func echoService(f *fixture, spy *spyBroker, timeout time.Duration) *atomic.Int64 {
	var read atomic.Int64
	b := spy.h.(*broker.Broker)
	b.BodyTimeout = timeout
	b.Handle("POST /v1/echo", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body) // whole, as the services (the MCP SDK, hostexec) read it
		read.Add(int64(len(b)))
		n := len(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		fmt.Fprintf(w, "read %d", n)
	}))
	return &read
}

// zeros is an endless body that costs no memory.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestOversizedAndSlowBodiesAreBounded: through both doors, a body over
// the broker's cap is refused (declared: before the service reads a byte;
// chunked: once the cap is passed) and the supervisor's heap does not grow
// with it; a body trickled byte by byte is cut at the body timeout, and the
// connection's next request still works. The control: a body under the cap
// arrives whole.
func TestOversizedAndSlowBodiesAreBounded(t *testing.T) {
	for name, d := range brokerDoors {
		t.Run(name+" door", func(t *testing.T) {
			f, spy := brokerFixture(t)
			read := echoService(f, spy, 2*time.Second)
			post := func(c net.Conn, head string, body io.Reader) (int, string) {
				c.SetDeadline(time.Now().Add(30 * time.Second))
				go func() {
					io.WriteString(c, head)
					if body != nil {
						io.Copy(c, body)
					}
				}()
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					return 0, err.Error()
				}
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				return resp.StatusCode, string(b)
			}

			// Control: 1 MiB arrives whole.
			c := dialBroker(t, f, d, 80)
			st, body := post(c, fmt.Sprintf("POST /v1/echo HTTP/1.1\r\nHost: airlock.internal\r\nContent-Length: %d\r\n\r\n", 1<<20), io.LimitReader(zeros{}, 1<<20))
			if st != 200 || body != fmt.Sprintf("read %d", 1<<20) {
				t.Fatalf("a 1 MiB body = %d %q", st, body)
			}

			// Declared too big: refused before the service reads.
			read.Store(0)
			c = dialBroker(t, f, d, 80)
			st, _ = post(c, "POST /v1/echo HTTP/1.1\r\nHost: airlock.internal\r\nContent-Length: 1073741824\r\n\r\n", io.LimitReader(zeros{}, 1<<20))
			if st != http.StatusRequestEntityTooLarge || read.Load() != 0 {
				t.Errorf("a declared 1 GiB body = %d, service read %d bytes; want 413 and none", st, read.Load())
			}

			// Chunked and endless: cut at the cap, the heap stays small.
			read.Store(0)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c = dialBroker(t, f, d, 80)
			pr, pw := io.Pipe()
			go func() {
				cw := bufio.NewWriterSize(pw, 64<<10)
				buf := make([]byte, 32<<10)
				for i := 0; i < 4096; i++ { // 128 MiB, if nobody stops it
					if _, err := fmt.Fprintf(cw, "%x\r\n%s\r\n", len(buf), buf); err != nil {
						return
					}
				}
				cw.WriteString("0\r\n\r\n")
				cw.Flush()
				pw.Close()
			}()
			st, _ = post(c, "POST /v1/echo HTTP/1.1\r\nHost: airlock.internal\r\nTransfer-Encoding: chunked\r\n\r\n", pr)
			pr.Close()
			runtime.ReadMemStats(&after)
			if st != http.StatusRequestEntityTooLarge || read.Load() > broker.DefaultMaxBody {
				t.Errorf("an endless chunked body = %d, service read %d bytes; want 413 at most %d", st, read.Load(), broker.DefaultMaxBody)
			}
			if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
				t.Errorf("the heap grew %d MiB while an endless body was refused", grew>>20)
			}

			// Slow: one byte every 100 ms of a 1000-byte body is cut at 2 s.
			c = dialBroker(t, f, d, 80)
			slow := io.Reader(&trickle{n: 1000, every: 100 * time.Millisecond})
			start := time.Now()
			st, body = post(c, "POST /v1/echo HTTP/1.1\r\nHost: airlock.internal\r\nContent-Length: 1000\r\n\r\n", slow)
			took := time.Since(start)
			if st == 200 || took > 6*time.Second {
				t.Errorf("a trickled body = %d %q after %s; want it cut at the 2 s body timeout", st, body, took)
			}
			// A slow header is cut by the server's header timeout (10 s):
			// covered by the gateway's own tests; the broker adds the body.
		})
	}
}

// TestALongAnswerIsNotCutByTheBodyTimeout: the deadline covers the body
// only: a service that answers after the timeout (an approval waiting)
// still answers.
func TestALongAnswerIsNotCutByTheBodyTimeout(t *testing.T) {
	for name, d := range brokerDoors {
		f, spy := brokerFixture(t)
		b := spy.h.(*broker.Broker)
		b.BodyTimeout = 500 * time.Millisecond
		b.Handle("POST /v1/wait", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(1500 * time.Millisecond):
				io.WriteString(w, "answered")
			case <-r.Context().Done():
			}
		}))
		c := dialBroker(t, f, d, 80)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "POST /v1/wait HTTP/1.1\r\nHost: airlock.internal\r\nContent-Length: 2\r\n\r\n{}")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s door: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "answered" {
			t.Errorf("%s door: a long answer = %d %q", name, resp.StatusCode, body)
		}
	}
}

// trickle yields n bytes, one per read, every apart.
type trickle struct {
	n     int
	every time.Duration
}

func (t *trickle) Read(p []byte) (int, error) {
	if t.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(t.every)
	p[0] = 'x'
	t.n--
	return 1, nil
}

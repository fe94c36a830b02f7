package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
)

// witness is a TCP echo server on loopback that counts the connections it
// accepts: the proof that the gateway dialled, or did not.
func witness(t *testing.T) (port uint16, dials *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	dials = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String()).Port(), dials
}

// recordingApprover answers every question the same way and keeps them.
type recordingApprover struct {
	answer Answer
	mu     sync.Mutex
	asked  []Question
}

func (a *recordingApprover) Decide(_ context.Context, q Question) Answer {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, q)
	return a.answer
}

func (a *recordingApprover) questions() []Question {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Question(nil), a.asked...)
}

// door opens a connection to host:port through one of the gateway's doors
// and reports whether it was let through (200 to CONNECT, or a serve
// function from Accept, whose connection then echoes).
type door func(t *testing.T, f *fixture, host string, port uint16) bool

var doors = map[string]door{
	"proxy CONNECT": func(t *testing.T, f *fixture, host string, port uint16) bool {
		t.Helper()
		return connectStatus(t, f.proxy, fmt.Sprintf("%s:%d", host, port)) == http.StatusOK
	},
	"transparent Accept": func(t *testing.T, f *fixture, host string, port uint16) bool {
		t.Helper()
		serve := f.gw.Accept(context.Background(), host, port)
		if serve == nil {
			return false
		}
		c := acceptPair(t, serve)
		fmt.Fprint(c, "ping\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || l != "ping\n" {
			t.Errorf("echo through the accepted connection = %q, %v", l, err)
		}
		c.Close() // the tunnel is audited when it ends
		return true
	},
}

// httptestServer is a plain HTTP server on loopback answering body; it
// returns its address.
func httptestServer(t *testing.T, body string) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	t.Cleanup(up.Close)
	return up.Listener.Addr().String()
}

func checkRecord(t *testing.T, r audit.Record, decision, rule, reason string) {
	t.Helper()
	if r.Decision != decision || r.Rule != rule || !strings.Contains(r.Reason, reason) {
		t.Errorf("audit = %s [%s] %q, want %s [%s] containing %q", r.Decision, r.Rule, r.Reason, decision, rule, reason)
	}
}

func TestAskedConnectionsDialOnlyWhenTheApproverAllows(t *testing.T) {
	tests := map[string]struct {
		approver       *recordingApprover // nil: no approver configured
		wantThrough    bool
		decision, rule string
		reason         string
	}{
		"with no approver an ask is denied at once": {
			decision: "deny", rule: "no approver", reason: "ask: nobody to ask, so denied (no rule covers host new.test port"},
		"an approver's allow dials the host": {
			approver: &recordingApprover{answer: Answer{Allow: true, Reason: "a test said yes"}}, wantThrough: true,
			decision: "allow", rule: "approver", reason: "raw tunnel"},
		"an approver's deny dials nothing": {
			approver: &recordingApprover{answer: Answer{Reason: "a test said no"}},
			decision: "deny", rule: "approver", reason: "ask: denied: a test said no"},
	}
	for doorName, open := range doors {
		for name, tt := range tests {
			t.Run(doorName+"/"+name, func(t *testing.T) {
				port, dials := witness(t)
				o := options{policy: policy.Config{Default: policy.Ask}, static: map[string]netip.Addr{"new.test": loopback}}
				if tt.approver != nil {
					tt.approver.asked = nil
					o.approver = tt.approver
				}
				f := newFixture(t, o)
				if got := open(t, f, "NEW.test.", port); got != tt.wantThrough {
					t.Fatalf("let through = %v, want %v", got, tt.wantThrough)
				}
				want := int32(0)
				if tt.wantThrough {
					want = 1
				}
				// A tunnel's record is written when it ends: wait for it.
				r := waitRecord(t, f, func(r audit.Record) bool { return r.Kind == "network" && r.Decision != "ask" })
				if n := dials.Load(); n != want {
					t.Errorf("%d dials, want %d", n, want)
				}
				checkRecord(t, r, tt.decision, tt.rule, tt.reason)
				if tt.approver == nil {
					return
				}
				qs := tt.approver.questions()
				if len(qs) != 1 {
					t.Fatalf("%d questions, want 1", len(qs))
				}
				if q := qs[0]; q.Sandbox != "sb-test" || q.Kind != "network" || q.Host != "new.test" || q.Port != port || !strings.Contains(q.Reason, "asking for approval") {
					t.Errorf("question = %+v", q)
				}
				var ask audit.Record
				for _, r := range f.records() {
					if r.Decision == "ask" {
						ask = r
					}
				}
				checkRecord(t, ask, "ask", "default", "no rule covers host new.test")
			})
		}
	}
}

func TestAnApprovedHTTPRequestNamesItsMethodAndPath(t *testing.T) {
	up := httptestServer(t, "approved")
	a := &recordingApprover{answer: Answer{Allow: true, Reason: "ok"}}
	f := newFixture(t, options{policy: policy.Config{Default: policy.Ask}, approver: a,
		static: map[string]netip.Addr{"new.test": loopback}, ports: map[uint16]string{80: up}})
	resp, err := f.client.Post("http://new.test/v1/things", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "approved" {
		t.Fatalf("body %q", body)
	}
	qs := a.questions()
	if len(qs) != 1 || qs[0].Method != "POST" || qs[0].Path != "/v1/things" || qs[0].Port != 80 {
		t.Errorf("questions = %+v", qs)
	}
	checkRecord(t, f.lastRecord("http"), "allow", "approver", "")
}

func TestAnApproverThatDoesNotAnswerIsCutOffByTheContext(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	// This approver ignores ctx: the gateway must stop waiting anyway.
	f := newFixture(t, options{policy: policy.Config{Default: policy.Ask}, static: map[string]netip.Addr{"new.test": loopback},
		approver: ApproverFunc(func(context.Context, Question) Answer { <-stuck; return Answer{Allow: true} })})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if f.gw.Accept(ctx, "new.test", 5432) != nil {
		t.Fatal("accepted without an answer")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waited %v for a 200 ms context", d)
	}
	checkRecord(t, f.lastRecord("network"), "deny", "approver", "ask: no answer before the time ran out, so denied")
}

func TestFailuresAreErrorsAndRefusalsAreDenies(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedPort := netip.MustParseAddrPort(closed.Addr().String()).Port()
	closed.Close() // nothing listens there now: a dial is refused
	tests := map[string]struct {
		host           string
		port           uint16
		status         int // from CONNECT
		decision, rule string
		reason         string
	}{
		"an allowed name that does not resolve is an error, not a deny": {
			host: "gone.test", port: 443, status: http.StatusBadGateway,
			decision: "error", rule: "gone.test", reason: "gone.test does not resolve on the host: lookup gone.test: no such host"},
		"an allowed tunnel whose dial is refused is an error": {
			host: "db.test", port: refusedPort, status: http.StatusBadGateway,
			decision: "error", rule: fmt.Sprintf("db.test:%d", refusedPort), reason: "connection refused"},
		"a host no rule allows is a deny naming the default": {
			host: "other.test", port: 443, status: http.StatusForbidden,
			decision: "deny", rule: "default", reason: "no rule allows host other.test port 443 and the default is deny"},
		"a denied host is a deny naming the rule": {
			host: "x.evil.test", port: 443, status: http.StatusForbidden,
			decision: "deny", rule: "*.evil.test", reason: "matches deny rule *.evil.test"},
		"an allowed name resolving to loopback is a deny naming the class": {
			host: "rebind.test", port: 443, status: http.StatusForbidden,
			decision: "deny", rule: "class:loopback", reason: "loopback"},
	}
	notFound := nxdomain{"rebind.test": {loopback}}
	for name, tt := range tests {
		o := options{policy: policy.Config{AllowHosts: []string{"gone.test", "rebind.test", fmt.Sprintf("db.test:%d", refusedPort)}, DenyHosts: []string{"*.evil.test"}},
			static: map[string]netip.Addr{"db.test": loopback}, resolver: notFound}
		t.Run("proxy CONNECT/"+name, func(t *testing.T) {
			f := newFixture(t, o)
			if st := connectStatus(t, f.proxy, fmt.Sprintf("%s:%d", tt.host, tt.port)); st != tt.status {
				t.Errorf("CONNECT status %d, want %d", st, tt.status)
			}
			checkRecord(t, f.lastRecord("network"), tt.decision, tt.rule, tt.reason)
		})
		t.Run("transparent Accept/"+name, func(t *testing.T) {
			f := newFixture(t, o)
			if f.gw.Accept(context.Background(), tt.host, tt.port) != nil {
				t.Error("accepted")
			}
			checkRecord(t, f.lastRecord("network"), tt.decision, tt.rule, tt.reason)
		})
	}
}

// nxdomain is a fakeDNS whose misses look like a real resolver's NXDOMAIN.
type nxdomain map[string][]netip.Addr

func (n nxdomain) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

package publish

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/config"
)

// records collects what a server audits.
type records struct {
	mu  sync.Mutex
	all []audit.Record
}

func (r *records) add(x audit.Record) { r.mu.Lock(); r.all = append(r.all, x); r.mu.Unlock() }
func (r *records) get() []audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Record(nil), r.all...)
}

func published(t *testing.T, s string) config.Published {
	t.Helper()
	p, err := config.ParsePublished(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// dialTo is a Dial that reaches addr whatever port is asked for, and
// remembers the ports asked.
func dialTo(addr string, asked *[]uint16) Dial {
	var mu sync.Mutex
	return func(ctx context.Context, port uint16) (net.Conn, error) {
		mu.Lock()
		*asked = append(*asked, port)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

func TestAConnectionIsJoinedToTheSandboxsPortAndAudited(t *testing.T) {
	inside := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write([]byte("inside got " + string(b)))
	}))
	defer inside.Close()
	s, err := Listen([]config.Published{published(t, "8000")})
	if err != nil {
		t.Fatal(err)
	}
	var recs records
	var asked []uint16
	s.Serve(dialTo(inside.Listener.Addr().String(), &asked), recs.add)
	p := s.Ports()[0]
	if p.Host.Port() == 0 || p.Host.Addr().String() != "127.0.0.1" || p.Sandbox != 8000 {
		t.Fatalf("bound %v: want a free port on 127.0.0.1 for 8000", p)
	}
	resp, err := http.Post("http://"+p.Host.String()+"/", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "inside got hello" {
		t.Fatalf("answer %q", body)
	}
	http.DefaultClient.CloseIdleConnections() // the record is written when the connection ends
	deadline := time.Now().Add(5 * time.Second)
	for len(recs.get()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s.Close()
	rs := recs.get()
	if len(rs) != 1 || len(asked) != 1 || asked[0] != 8000 {
		t.Fatalf("records %+v, ports dialed %v: want one connection to 8000", rs, asked)
	}
	r := rs[0]
	if r.Kind != audit.KindInbound || r.Decision != audit.Allow || r.IP != "127.0.0.1" || r.Port != 8000 ||
		r.Extra["listen"] != p.Host.String() || !strings.HasPrefix(r.Extra["peer"], "127.0.0.1:") || r.BytesIn == 0 || r.BytesOut == 0 || r.Duration == 0 {
		t.Errorf("record %+v", r)
	}
}

func TestNothingAnsweringInsideIsAnErrorRecordAndAClosedConnection(t *testing.T) {
	s, err := Listen([]config.Published{published(t, "9")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var recs records
	s.Serve(func(context.Context, uint16) (net.Conn, error) { return nil, errors.New("connection refused") }, recs.add)
	c, err := net.Dial("tcp", s.Ports()[0].Host.String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a port with nothing behind it", n)
	}
	c.Close()
	s.Close()
	rs := recs.get()
	if len(rs) != 1 || rs[0].Decision != audit.Error || !strings.Contains(rs[0].Reason, "nothing answered on the sandbox's port 9") {
		t.Fatalf("records %+v", rs)
	}
}

func TestAPortInUseBindsNothingAndSaysWhatToDo(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free := published(t, "81")
	taken := published(t, busy.Addr().String()+":80")
	s, err := Listen([]config.Published{free, taken})
	if err == nil {
		s.Close()
		t.Fatal("listened on a port in use")
	}
	if !strings.Contains(err.Error(), "is already in use on this host: publish on another HOST_PORT") {
		t.Errorf("error %q", err)
	}
	// The first port, bound before the second failed, was let go: nothing
	// half-made. Listening on every free port again works.
	again, err := Listen([]config.Published{free})
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
}

func TestTheListenerIsOnTheGivenAddressAlone(t *testing.T) {
	s, err := Listen([]config.Published{published(t, "127.0.0.1::80")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Serve(func(context.Context, uint16) (net.Conn, error) { return nil, errors.New("no") }, func(audit.Record) {})
	port := s.Ports()[0].Host.Port()
	other := net.JoinHostPort("127.0.0.2", itoa(port))
	if c, err := net.DialTimeout("tcp", other, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("%s answered: the listener is not on 127.0.0.1 alone", other)
	}
	c, err := net.DialTimeout("tcp", s.Ports()[0].Host.String(), 2*time.Second)
	if err != nil {
		t.Fatalf("positive control: %v", err)
	}
	c.Close()
}

func TestCloseEndsOpenConnections(t *testing.T) {
	inside, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	go func() { // a server that holds its connections open
		for {
			c, err := inside.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	s, err := Listen([]config.Published{published(t, "80")})
	if err != nil {
		t.Fatal(err)
	}
	var recs records
	var asked []uint16
	s.Serve(dialTo(inside.Addr().String(), &asked), recs.add)
	c, err := net.Dial("tcp", s.Ports()[0].Host.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	time.Sleep(100 * time.Millisecond)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits on an open connection")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the host's connection is still open after Close")
	}
	if rs := recs.get(); len(rs) != 1 || rs[0].Decision != audit.Allow || rs[0].BytesIn != 1 {
		t.Errorf("records %+v", rs)
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

package dnsserver

import (
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
	"github.com/airlock-dev/airlock/internal/testutil"
)

func newServer(t testing.TB, prefix string) (*Server, string) {
	t.Helper()
	pol, err := policy.New(policy.Config{AllowHosts: []string{"api.example.com", "*.example.org", "db.example.net:5432"}, DenyHosts: []string{"evil.example.org"}})
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "audit.jsonl")
	al, err := audit.Open(logPath, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	return &Server{Policy: pol, Pool: NewPool(netip.MustParsePrefix(prefix)), Audit: al}, logPath
}

// serve runs s on real UDP and TCP sockets on loopback.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	udp, tcp := &dns.Server{PacketConn: pc, Handler: s}, &dns.Server{Listener: ln, Handler: s}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
	return pc.LocalAddr().String()
}

func query(t *testing.T, addr, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	r, _, err := c.Exchange(q, addr)
	if err != nil {
		t.Fatalf("%s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
	}
	return r
}

func TestAllowedNamesGetStableSyntheticAddresses(t *testing.T) {
	s, _ := newServer(t, "198.18.0.0/15")
	addr := serve(t, s)
	seen := map[string]string{}
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range []string{"api.example.com", "API.Example.com", "www.example.org", "example.org", "db.example.net"} {
			r := query(t, addr, network, name, dns.TypeA)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
				t.Fatalf("%s over %s: %v", name, network, r)
			}
			a := r.Answer[0].(*dns.A).A.String()
			if !netip.MustParsePrefix("198.18.0.0/15").Contains(netip.MustParseAddr(a)) {
				t.Errorf("%s -> %s, outside the pool", name, a)
			}
			key := dns.CanonicalName(name)
			if prev, ok := seen[key]; ok && prev != a {
				t.Errorf("%s changed address: %s then %s", name, prev, a)
			}
			seen[key] = a
			if back, ok := s.Pool.Name(netip.MustParseAddr(a)); !ok || back+"." != key {
				t.Errorf("%s maps back to %q", a, back)
			}
		}
	}
	if len(map[string]bool{seen["api.example.com."]: true, seen["www.example.org."]: true, seen["example.org."]: true}) != 3 {
		t.Errorf("distinct names share an address: %v", seen)
	}
}

func TestOtherTypesOfAllowedNamesAreEmpty(t *testing.T) {
	s, _ := newServer(t, "198.18.0.0/15")
	addr := serve(t, s)
	for _, qt := range []uint16{dns.TypeAAAA, dns.TypeMX, dns.TypeTXT, dns.TypeHTTPS} {
		r := query(t, addr, "udp", "api.example.com", qt)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("%s: %v, want NOERROR with no records", dns.TypeToString[qt], r)
		}
	}
}

func TestDeniedAndUnknownNamesAreNXDOMAIN(t *testing.T) {
	s, logPath := newServer(t, "198.18.0.0/15")
	addr := serve(t, s)
	for _, name := range []string{"evil.example.org", "other.test", "a.b.example.org", "secret-data.exfil.test", "1.2.3.4"} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT} {
			if r := query(t, addr, "udp", name, qt); r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
				t.Errorf("%s %s: %v, want NXDOMAIN", name, dns.TypeToString[qt], r)
			}
		}
	}
	if _, ok := s.Pool.Assign("probe.only"); !ok {
		t.Fatal("pool full")
	}
	if n := len(s.Pool.byName); n != 1 {
		t.Errorf("refused names took %d pool addresses", n-1)
	}
	recs := testutil.AuditRecords(t, logPath)
	if len(recs) != 15 {
		t.Fatalf("%d audit records, want one per answer (15)", len(recs))
	}
	for _, r := range recs {
		if r.Kind != "dns" || r.Decision != "deny" || r.Reason == "" || r.Extra["qtype"] == "" {
			t.Errorf("audit = %+v", r)
		}
	}
}

func TestPoolExhaustionIsServfail(t *testing.T) {
	s, _ := newServer(t, "198.18.0.0/30") // .1 .2 .3 usable
	addr := serve(t, s)
	for i, name := range []string{"a.example.org", "b.example.org", "c.example.org", "d.example.org"} {
		r := query(t, addr, "udp", name, dns.TypeA)
		want := dns.RcodeSuccess
		if i == 3 {
			want = dns.RcodeServerFailure
		}
		if r.Rcode != want {
			t.Errorf("%s: rcode %s, want %s", name, dns.RcodeToString[r.Rcode], dns.RcodeToString[want])
		}
	}
	// Known names keep answering.
	if r := query(t, addr, "udp", "a.example.org", dns.TypeA); r.Rcode != dns.RcodeSuccess {
		t.Errorf("a known name stopped resolving: %v", r)
	}
}

func TestMalformedQueries(t *testing.T) {
	s, _ := newServer(t, "198.18.0.0/15")
	two := new(dns.Msg)
	two.SetQuestion("api.example.com.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	if r := s.Answer(two); r.Rcode != dns.RcodeFormatError || len(r.Answer) != 0 {
		t.Errorf("two questions: %v", r)
	}
	upd := new(dns.Msg)
	upd.SetUpdate("example.org.")
	if r := s.Answer(upd); r.Rcode != dns.RcodeNotImplemented {
		t.Errorf("update: %v", r)
	}
	chaos := new(dns.Msg)
	chaos.SetQuestion("api.example.com.", dns.TypeA)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	if r := s.Answer(chaos); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
		t.Errorf("class CHAOS: %v", r)
	}
}

// FuzzAnswer: whatever bytes arrive, the answer packs, never names a refused
// name, and only ever carries pool addresses.
func FuzzAnswer(f *testing.F) {
	for _, name := range []string{"api.example.com.", "evil.example.org.", "x.example.org."} {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeA)
		b, _ := q.Pack()
		f.Add(b)
	}
	s, _ := newServer(f, "198.18.0.0/15")
	f.Fuzz(func(t *testing.T, raw []byte) {
		q := new(dns.Msg)
		if q.Unpack(raw) != nil {
			return
		}
		r := s.Answer(q)
		if _, err := r.Pack(); err != nil {
			t.Fatalf("answer does not pack: %v", err)
		}
		for _, rr := range r.Answer {
			a, ok := rr.(*dns.A)
			if !ok {
				t.Fatalf("non-A record %v", rr)
			}
			if s.Policy.Name(a.Hdr.Name).Verdict != policy.Allow {
				t.Fatalf("answered a refused name %q", a.Hdr.Name)
			}
			if !s.Pool.Contains(netip.AddrFrom4([4]byte(a.A.To4()))) {
				t.Fatalf("address %v outside the pool", a.A)
			}
		}
	})
}

func TestAskedAboutAndBrokerNames(t *testing.T) {
	tests := map[string]struct {
		cfg               policy.Config
		broker, approvals bool
		name              string
		wantAddr          bool // an A record from the pool, else NXDOMAIN
		decision, rule    string
		reason            string // substring
	}{
		"an unknown name is NXDOMAIN when nobody can be asked": {
			cfg: policy.Config{Default: policy.Ask}, name: "new.test",
			decision: "deny", rule: "no approver", reason: "ask: nobody to ask, so denied (no rule covers name new.test; asking for approval); answered NXDOMAIN"},
		"an unknown name gets a synthetic address when an approver will be asked at connection time": {
			cfg: policy.Config{Default: policy.Ask}, approvals: true, name: "New.Test.", wantAddr: true,
			decision: "ask", rule: "default", reason: "answered with a synthetic address: the connection to it waits for the decision"},
		"a denied name stays NXDOMAIN with an approver": {
			cfg: policy.Config{Default: policy.Ask, DenyHosts: []string{"*.evil.test"}}, approvals: true, name: "x.evil.test",
			decision: "deny", rule: "*.evil.test", reason: "matches deny rule *.evil.test; answered NXDOMAIN, not forwarded"},
		"an unknown name is NXDOMAIN when the default is deny, approver or not": {
			cfg: policy.Config{}, approvals: true, name: "new.test",
			decision: "deny", rule: "default", reason: "the default is deny"},
		"the broker's name gets a pool address": {
			broker: true, name: "airlock.internal", wantAddr: true,
			decision: "allow", rule: "broker", reason: "the gateway's broker"},
		"the broker's name in capitals with the root dot is the broker": {
			broker: true, name: "AIRLOCK.Internal.", wantAddr: true,
			decision: "allow", rule: "broker", reason: "the gateway's broker"},
		"the broker's name is NXDOMAIN without a broker, whatever the rules say": {
			cfg: policy.Config{AllowHosts: []string{"airlock.internal"}, Default: policy.Ask}, approvals: true, name: "airlock.internal",
			decision: "deny", rule: "broker", reason: "never dialled"},
		"a name under the broker's is not the broker": {
			broker: true, name: "x.airlock.internal",
			decision: "deny", rule: "default", reason: "no rule allows name x.airlock.internal"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pol, err := policy.New(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join(t.TempDir(), "audit.jsonl")
			al, err := audit.Open(logPath, "test", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer al.Close()
			s := &Server{Policy: pol, Pool: NewPool(netip.MustParsePrefix("198.18.0.0/15")), Audit: al, Broker: tt.broker, Approvals: tt.approvals}
			r := query(t, serve(t, s), "udp", tt.name, dns.TypeA)
			if tt.wantAddr {
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
					t.Fatalf("answer %v, want one A record", r)
				}
				a := netip.AddrFrom4([4]byte(r.Answer[0].(*dns.A).A.To4()))
				if back, ok := s.Pool.Name(a); !ok || back != strings.TrimSuffix(strings.ToLower(tt.name), ".") {
					t.Errorf("%s maps back to %q, %v", a, back, ok)
				}
			} else if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
				t.Fatalf("answer %v, want NXDOMAIN", r)
			}
			recs := testutil.AuditRecords(t, logPath)
			if len(recs) != 1 {
				t.Fatalf("%d audit records, want 1", len(recs))
			}
			if rec := recs[0]; rec.Decision != tt.decision || rec.Rule != tt.rule || !strings.Contains(rec.Reason, tt.reason) {
				t.Errorf("audit = %s [%s] %q, want %s [%s] containing %q", rec.Decision, rec.Rule, rec.Reason, tt.decision, tt.rule, tt.reason)
			}
		})
	}
}

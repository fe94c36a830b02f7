// Package dnsserver answers the sandbox's DNS queries inside the gateway. A
// name the policy allows gets a synthetic address from a private pool that
// maps back to the name, so the gateway knows which host every later
// connection is meant for and resolves it on the host itself; so does a name
// policy asks about when there is an approver (the connection waits, not the
// query), and airlock.internal, the gateway's broker; any other name gets
// NXDOMAIN. No query is ever forwarded, so DNS cannot carry data out.
package dnsserver

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/internal/audit"
	"github.com/airlock-dev/airlock/internal/policy"
)

// TTL of synthetic answers: short, so a client asks again rather than
// holding an address for long, but the mapping itself never changes.
const TTL = 60

// Pool hands out synthetic IPv4 addresses for names, one per name, for the
// life of the sandbox. Addresses are never reused: a client that cached an
// answer always reaches the name it asked for.
type Pool struct {
	mu     sync.Mutex
	prefix netip.Prefix
	next   netip.Addr
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
}

// NewPool returns a pool over prefix (an IPv4 range such as 198.18.0.0/15);
// the range's first address is skipped.
func NewPool(prefix netip.Prefix) *Pool {
	prefix = prefix.Masked()
	return &Pool{prefix: prefix, next: prefix.Addr().Next(), byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}}
}

// Assign returns name's address, giving it the next free one the first time.
// ok is false when the pool is exhausted.
func (p *Pool) Assign(name string) (addr netip.Addr, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.byName[name]; ok {
		return a, true
	}
	if !p.prefix.Contains(p.next) {
		return netip.Addr{}, false
	}
	a := p.next
	p.next = a.Next()
	p.byName[name], p.byAddr[a] = a, name
	return a, true
}

// Name returns the name that addr was assigned to.
func (p *Pool) Name(addr netip.Addr) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.byAddr[addr.Unmap()]
	return n, ok
}

// Contains reports whether addr lies in the pool's range.
func (p *Pool) Contains(addr netip.Addr) bool { return p.prefix.Contains(addr.Unmap()) }

// Server answers queries from policy and the pool.
type Server struct {
	Policy *policy.Policy
	Pool   *Pool
	Audit  *audit.Log // nil: nothing recorded
	// Broker answers airlock.internal (policy.BrokerHost) with its own pool
	// address, so the transparent door reaches the gateway's broker by name;
	// false answers it NXDOMAIN.
	Broker bool
	// Approvals says the gateway has an approver: a name policy asks about
	// gets a synthetic address at once (resolvers give up long before a
	// human answers) and the connection to it is what waits for the
	// decision. False answers such a name NXDOMAIN, like a deny.
	Approvals bool

	swapped atomic.Pointer[policy.Policy] // SetPolicy's, over Policy
}

// SetPolicy puts p in force for every query from now on.
func (s *Server) SetPolicy(p *policy.Policy) { s.swapped.Store(p) }

func (s *Server) policy() *policy.Policy {
	if p := s.swapped.Load(); p != nil {
		return p
	}
	return s.Policy
}

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	w.WriteMsg(s.Answer(q))
}

// Answer builds the reply to q. Exactly one question of class IN is served;
// an allowed name answers A with its synthetic address and every other type
// (AAAA included: the sandbox has no IPv6 route) with no records, so the
// answer is the same whatever the type; anything else is NXDOMAIN.
func (s *Server) Answer(q *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	if q.Opcode != dns.OpcodeQuery || q.Response || len(q.Question) != 1 {
		m.SetRcode(q, dns.RcodeFormatError)
		if q.Opcode != dns.OpcodeQuery {
			m.Rcode = dns.RcodeNotImplemented
		}
		m.Question = nil
		return m
	}
	m.SetReply(q)
	m.RecursionAvailable = true
	question := q.Question[0]
	name := strings.TrimSuffix(strings.ToLower(question.Name), ".")
	qtype := dns.TypeToString[question.Qtype]
	if qtype == "" {
		qtype = fmt.Sprintf("TYPE%d", question.Qtype)
	}
	rec := audit.Record{Kind: "dns", Host: name, Extra: map[string]string{"qtype": qtype}}
	defer func() {
		if s.Audit != nil {
			s.Audit.Write(rec)
		}
	}()
	if question.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		rec.Decision, rec.Reason = "deny", "only class IN is answered"
		return m
	}
	var d policy.Decision
	if s.Broker && policy.IsBroker(name) {
		d = policy.Decision{Verdict: policy.Allow, Rule: "broker", Reason: policy.BrokerHost + " is the gateway's broker"}
	} else {
		d = s.policy().Name(name)
	}
	rec.Rule = d.Rule
	if d.Verdict == policy.Ask && !s.Approvals {
		d = policy.Decision{Verdict: policy.Deny, Rule: "no approver", Reason: "ask: nobody to ask, so denied (" + d.Reason + ")"}
		rec.Rule = d.Rule
	}
	if d.Verdict == policy.Deny {
		m.Rcode = dns.RcodeNameError
		rec.Decision, rec.Reason = "deny", d.Reason+"; answered NXDOMAIN, not forwarded"
		return m
	}
	addr, ok := s.Pool.Assign(name)
	if !ok {
		m.Rcode = dns.RcodeServerFailure
		rec.Decision, rec.Reason = "error", "the synthetic address pool is exhausted"
		return m
	}
	rec.Decision, rec.Reason = d.Verdict.String(), d.Reason
	if d.Verdict == policy.Ask {
		rec.Reason += "; answered with a synthetic address: the connection to it waits for the decision"
	}
	if question.Qtype == dns.TypeA || question.Qtype == dns.TypeANY {
		rec.IP = addr.String()
		m.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: TTL},
			A:   addr.AsSlice(),
		}}
	}
	return m
}

// Package policy decides whether a sandbox may reach a host, port, endpoint or address; it does no I/O.
package policy

import (
	"errors"
	"fmt"
	"net/netip"
)

// Verdict is what the gateway must do with a connection or request.
type Verdict int

const (
	// Deny refuses; it is the zero value so a forgotten Default fails closed.
	Deny Verdict = iota
	// Allow lets the connection or request through.
	Allow
	// Ask holds the connection until a human decides (Config.Default == Ask).
	Ask
)

func (v Verdict) String() string {
	switch v {
	case Deny:
		return "deny"
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decision is a verdict with the rule that produced it and why, ready for the audit log.
type Decision struct {
	Verdict Verdict
	// Rule is the configured rule text that decided (e.g. "*.github.com"), or one of
	// "default", "invalid", "explicit", "gateway", "broker", "endpoint rules",
	// "no endpoint rules" or "class:NAME" (see Classify) when no configured rule did.
	Rule string
	// Reason is one human sentence.
	Reason string
	// Intercept, for Allow, says TLS/HTTP interception applies (bare host rules on 80/443,
	// and any host with endpoint rules); false means a raw tunnel. For Ask it says the
	// same of the connection should a human allow it, so an approval needs no second look.
	Intercept bool
	// Tunnel, for Allow, says the connection is a blind TLS tunnel (a Config.Tunnels rule):
	// not intercepted, and only after the ClientHello's SNI named the host.
	Tunnel bool
}

func (d Decision) String() string {
	return fmt.Sprintf("%s [%s]: %s", d.Verdict, d.Rule, d.Reason)
}

// Config is the rule set; every rule is validated by New.
//
// Host rules (AllowHosts, DenyHosts):
//
//	example.com          the name, ports 80 and 443, intercepted
//	*.example.com        example.com and one more label (a.example.com, not a.b.example.com)
//	example.com:8443     that port only, raw tunnel
//	example.com:*        every port, raw tunnel
//	10.1.2.3, 10.1.2.3:5432, [::1]:8080, [::1]:*   an address (same port forms)
//	10.0.0.0/8, 10.0.0.0/8:443, [fd00::/8]:*       a CIDR range (same port forms)
//
// In DenyHosts a rule without a port denies every port: denying a host means all of it.
//
// Endpoint rules are "HOST METHOD PATH": HOST is a name, *.name or address (no port),
// METHOD is a method or "*", PATH is exact ("/v1/messages") or a prefix ("/repos/*",
// which matches "/repos/" and everything below it but not "/repos"; "*" or "/*" is any path).
type Config struct {
	AllowHosts []string
	DenyHosts  []string
	Endpoints  []string
	// Tunnels are allow rules for hosts reached through a blind TLS tunnel (config:
	// intercept: false): a name or *.name, bare (port 443) or with a port. The gateway
	// checks the ClientHello's SNI names the host, then copies bytes without looking;
	// so no endpoint rule may cover such a host (New refuses), nor a secret (the caller
	// checks with Overlaps: secrets are not the policy's). Where an allow rule of the same
	// kind names the host too, the allow rule wins: interception is the safer reading.
	Tunnels []string
	Default Verdict // Deny unless set; Ask queues unknown hosts for approval
	// GatewayAddrs are the gateway's own listening addresses; port 0 means every port.
	// They are refused even for explicit rules: a sandbox that dials the gateway's own
	// front door from the outside could skip per-sandbox authentication or loop forever.
	GatewayAddrs []netip.AddrPort
	// Script, if set, is asked about names no deny rule covers, before the
	// allow rules (a policy_script's is_host_allowed): it may allow a name
	// or deny one the rules allow, never undo a deny rule, and it is not
	// asked about addresses, so IP-class refusals stand.
	Script HostScript
	// StaticHosts (--add-host NAME:IP) are not configured here: the gateway answers those
	// names itself and passes explicit=true to Addr for their addresses.
}

// HostScript decides names in code. opinion false is no opinion; an error
// is read as a deny, its Rule (if it has one) naming the script's line.
type HostScript interface {
	IsHostAllowed(host string, port uint16) (allowed, opinion bool, err error)
	File() string
}

// Policy is a validated, immutable rule set; it is safe for concurrent use.
type Policy struct {
	script    HostScript
	def       Verdict
	deny      []hostRule
	allow     []hostRule
	endpoints []endpointRule
	gateway   []netip.AddrPort
}

// New validates every rule and returns the policy, or an error naming each bad rule.
func New(c Config) (*Policy, error) {
	p := &Policy{def: c.Default, script: c.Script}
	var errs []error
	if c.Default != Deny && c.Default != Allow && c.Default != Ask {
		errs = append(errs, fmt.Errorf("policy: default verdict %d is not Deny, Allow or Ask", int(c.Default)))
	}
	for _, s := range c.DenyHosts {
		r, err := parseHostRule(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: deny rule %q: %w (accepted: %s)", s, err, hostForms))
			continue
		}
		p.deny = append(p.deny, r)
	}
	for _, s := range c.AllowHosts {
		r, err := parseHostRule(s)
		if err == nil {
			if err = broadWildcard(r); err != nil { // a deny may be broad: it only narrows
				errs = append(errs, fmt.Errorf("policy: allow rule %q: %w", s, err))
				continue
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: allow rule %q: %w (accepted: %s)", s, err, hostForms))
			continue
		}
		p.allow = append(p.allow, r)
	}
	for _, s := range c.Endpoints {
		r, err := parseEndpointRule(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: endpoint rule %q: %w (accepted: %s)", s, err, endpointForms))
			continue
		}
		p.endpoints = append(p.endpoints, r)
	}
	for _, s := range c.Tunnels {
		r, err := p.parseTunnel(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("policy: tunnel rule %q: %w", s, err))
			continue
		}
		p.allow = append(p.allow, r)
	}
	for _, g := range c.GatewayAddrs {
		if !g.Addr().IsValid() {
			errs = append(errs, errors.New("policy: gateway address is not a valid IP address"))
			continue
		}
		p.gateway = append(p.gateway, netip.AddrPortFrom(g.Addr().WithZone("").Unmap(), g.Port()))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// Host decides a connection to a name and port, before the name is resolved.
// Precedence (Cloister): exact deny > pattern deny > exact allow > pattern allow > default.
// An address literal is decided as Direct.
func (p *Policy) Host(name string, port uint16) Decision {
	if ip, ok := parseAddrLiteral(name); ok {
		return p.Direct(ip, port)
	}
	n, err := NormalizeName(name)
	if err != nil {
		return Decision{Verdict: Deny, Rule: ruleInvalid, Reason: fmt.Sprintf("host %q is not a valid name: %v", name, err)}
	}
	if port == 0 {
		return Decision{Verdict: Deny, Rule: ruleInvalid, Reason: fmt.Sprintf("host %s port 0 cannot be dialled", n)}
	}
	if n == BrokerHost {
		return brokerDecision
	}
	match := func(r *hostRule) bool { return r.matchName(n) }
	if r := pick(p.deny, kindName, match, port, true); r != nil {
		return Decision{Verdict: Deny, Rule: r.text, Reason: fmt.Sprintf("host %s matches deny rule %s", n, r.text)}
	}
	if r := pick(p.deny, kindPattern, match, port, true); r != nil {
		return Decision{Verdict: Deny, Rule: r.text, Reason: fmt.Sprintf("host %s matches deny rule %s", n, r.text)}
	}
	if d, ok := p.askScript(n, port); ok {
		return d
	}
	r := pick(p.allow, kindName, match, port, false)
	if r == nil {
		r = pick(p.allow, kindPattern, match, port, false)
	}
	if r != nil && r.tunnel {
		return Decision{Verdict: Allow, Rule: r.text, Tunnel: true,
			Reason: fmt.Sprintf("host %s port %d matches tunnel rule %s; blind TLS tunnel (intercept: false)", n, port, r.text)}
	}
	if r != nil {
		icpt, how := p.intercept(n, r.ports.bare)
		return Decision{Verdict: Allow, Rule: r.text, Intercept: icpt,
			Reason: fmt.Sprintf("host %s port %d matches allow rule %s; %s", n, port, r.text, how)}
	}
	return p.byDefault(fmt.Sprintf("host %s port %d", n, port), n, port, p.hint(n, port))
}

// Name decides whether DNS may answer for a name: it may when some allow rule
// covers the name on any port and no deny rule covers the whole name. The
// port is decided later, by Host, when the sandbox connects. Same precedence
// as Host; an address literal or an invalid name is refused.
func (p *Policy) Name(name string) Decision {
	if _, ok := parseAddrLiteral(name); ok {
		return Decision{Verdict: Deny, Rule: ruleInvalid, Reason: fmt.Sprintf("%s is an address, not a name", name)}
	}
	n, err := NormalizeName(name)
	if err != nil {
		return Decision{Verdict: Deny, Rule: ruleInvalid, Reason: fmt.Sprintf("name %q is not valid: %v", name, err)}
	}
	if n == BrokerHost {
		return brokerDecision
	}
	whole := func(kind ruleKind, rules []hostRule, deny bool) *hostRule {
		for i := range rules {
			r := &rules[i]
			if r.kind == kind && r.matchName(n) && (!deny || r.ports.bare || r.ports.any) {
				return r
			}
		}
		return nil
	}
	for _, k := range []ruleKind{kindName, kindPattern} {
		if r := whole(k, p.deny, true); r != nil {
			return Decision{Verdict: Deny, Rule: r.text, Reason: fmt.Sprintf("name %s matches deny rule %s", n, r.text)}
		}
	}
	for _, k := range []ruleKind{kindName, kindPattern} {
		if r := whole(k, p.allow, false); r != nil {
			return Decision{Verdict: Allow, Rule: r.text, Reason: fmt.Sprintf("name %s matches allow rule %s", n, r.text)}
		}
	}
	if p.script != nil { // DNS answers where the script allows the web ports; Host decides the port
		for _, port := range []uint16{443, 80} {
			if d, ok := p.askScript(n, port); ok && d.Verdict == Allow {
				d.Intercept, d.Reason = false, fmt.Sprintf("name %s: %s", n, d.Reason)
				return d
			}
		}
	}
	d := p.byDefault("name "+n, n, 443, "")
	d.Intercept = false
	return d
}

// askScript is the script's opinion of a name and port, if it has one.
func (p *Policy) askScript(n string, port uint16) (Decision, bool) {
	if p.script == nil {
		return Decision{}, false
	}
	allowed, opinion, err := p.script.IsHostAllowed(n, port)
	rule := "script:" + p.script.File() + ":is_host_allowed"
	if err != nil {
		if r, ok := err.(interface{ Rule() string }); ok {
			rule = r.Rule()
		}
		return Decision{Verdict: Deny, Rule: rule, Reason: fmt.Sprintf("host %s port %d: %v (a failing script denies)", n, port, err)}, true
	}
	if !opinion {
		return Decision{}, false
	}
	if !allowed {
		return Decision{Verdict: Deny, Rule: rule, Reason: fmt.Sprintf("host %s port %d: is_host_allowed returned False", n, port)}, true
	}
	icpt, how := p.intercept(n, port == 80 || port == 443)
	return Decision{Verdict: Allow, Rule: rule, Intercept: icpt, Reason: fmt.Sprintf("host %s port %d: is_host_allowed returned True; %s", n, port, how)}, true
}

// hint explains a default-deny when a rule covers the name on other ports, the commonest surprise.
func (p *Policy) hint(n string, port uint16) string {
	for i := range p.allow {
		r := &p.allow[i]
		if (r.kind == kindName || r.kind == kindPattern) && r.matchName(n) {
			return fmt.Sprintf(" (allow rule %s covers %s but not port %d; add %s:%d for a raw tunnel)", r.text, n, port, n, port)
		}
	}
	return ""
}

// byDefault applies Config.Default to a name nothing matched.
func (p *Policy) byDefault(subject, host string, port uint16, hint string) Decision {
	switch p.def {
	case Allow:
		icpt, how := p.intercept(host, port == 80 || port == 443)
		return Decision{Verdict: Allow, Rule: ruleDefault, Intercept: icpt,
			Reason: fmt.Sprintf("no rule covers %s and the default is allow; %s", subject, how)}
	case Ask:
		icpt, _ := p.intercept(host, port == 80 || port == 443)
		return Decision{Verdict: Ask, Rule: ruleDefault, Intercept: icpt, Reason: fmt.Sprintf("no rule covers %s; asking for approval", subject)}
	}
	return Decision{Verdict: Deny, Rule: ruleDefault, Reason: fmt.Sprintf("no rule allows %s and the default is deny%s", subject, hint)}
}

// intercept says whether an allowed connection is intercepted and how to describe it.
// A host with endpoint rules is always intercepted, because a raw tunnel would carry
// requests past those rules unseen; on a non-HTTP port that fails closed.
func (p *Policy) intercept(host string, bare bool) (bool, string) {
	if p.hasEndpoints(host) {
		return true, "intercepted because the host has endpoint rules"
	}
	if bare {
		return true, "intercepted"
	}
	return false, "raw tunnel"
}

// parseTunnel reads a Tunnels rule: a name or pattern (SNI carries names,
// never addresses), bare meaning port 443, and no endpoint rule over it.
func (p *Policy) parseTunnel(s string) (hostRule, error) {
	r, err := parseHostRule(s)
	if err != nil {
		return r, fmt.Errorf("%w (accepted: example.com, *.example.com, example.com:8443)", err)
	}
	if r.kind != kindName && r.kind != kindPattern {
		return r, errors.New("a tunnel is checked by the TLS server name, so it takes a name or *.name, not an address")
	}
	if err := broadWildcard(r); err != nil {
		return r, err
	}
	if r.ports.bare {
		r.ports = portSpec{port: 443}
	}
	r.tunnel = true
	for i := range p.endpoints {
		if e := &p.endpoints[i]; e.host.kind != kindName || !looksAddr(e.host.name) {
			if overlap(&r, &e.host) {
				return r, fmt.Errorf("endpoint rule %q covers it, but a blind tunnel (intercept: false) cannot see requests: drop the endpoint rule or intercept the host", e.text)
			}
		}
	}
	return r, nil
}

func looksAddr(s string) bool { _, err := netip.ParseAddr(s); return err == nil }

// overlap reports whether two name rules (kindName or kindPattern) can match one name.
func overlap(a, b *hostRule) bool {
	if a.kind == kindName && b.kind == kindName {
		return a.name == b.name
	}
	if a.kind == kindName {
		a, b = b, a
	}
	if b.kind == kindName {
		return MatchPattern(a.name, b.name)
	}
	return a.name == b.name || MatchPattern(a.name, b.name) || MatchPattern(b.name, a.name)
}

// Overlaps reports whether the tunnel rule and the host (a name or *.name, as a secret's
// hosts are written) can name one host: a secret must never go to a host that is
// tunnelled, where it could not be swapped in. Unparseable input overlaps (fails closed).
func Overlaps(tunnel, host string) bool {
	a, err1 := parseHostRule(tunnel)
	b, err2 := parseHostRule(host)
	if err1 != nil || err2 != nil {
		return true
	}
	if (a.kind != kindName && a.kind != kindPattern) || (b.kind != kindName && b.kind != kindPattern) {
		return false
	}
	return overlap(&a, &b)
}

// Addr decides whether a resolved (or direct) address may be dialled. Internal, special
// and non-unicast classes are refused unless a rule names the address (or a CIDR inside
// the refused range) on that port, or explicit is true (--add-host addresses).
// Unspecified, multicast and broadcast addresses and the gateway's own addresses are
// refused even then.
func (p *Policy) Addr(ip netip.Addr, port uint16, explicit bool) Decision {
	ip, c, d, done := p.precheck(ip, port)
	if done {
		return d
	}
	if !c.refused {
		return Decision{Verdict: Allow, Rule: "class:" + c.name, Reason: fmt.Sprintf("address %s is public", ip)}
	}
	if c.never {
		return refusal(ip, c, "")
	}
	if explicit {
		return Decision{Verdict: Allow, Rule: ruleExplicit,
			Reason: fmt.Sprintf("address %s is %s but was named explicitly (--add-host)", ip, c.describe())}
	}
	if r := p.allowIP(ip, port); r != nil {
		if r.names(c) {
			return Decision{Verdict: Allow, Rule: r.text,
				Reason: fmt.Sprintf("address %s is %s but allow rule %s names it", ip, c.describe(), r.text)}
		}
		return refusal(ip, c, fmt.Sprintf("; allow rule %s is broader than that range, so name the address or a range inside it", r.text))
	}
	return refusal(ip, c, "")
}

// Direct decides a connection the sandbox made to an address with no name: it needs an
// allow rule naming the address (or a CIDR holding it) and the port, then the class checks
// of Addr with that rule as the explicit naming.
func (p *Policy) Direct(ip netip.Addr, port uint16) Decision {
	ip, c, d, done := p.precheck(ip, port)
	if done {
		return d
	}
	r := p.allowIP(ip, port)
	if r == nil {
		if c.refused && p.def != Deny {
			return refusal(ip, c, "")
		}
		return p.byDefault(fmt.Sprintf("direct connections to %s port %d", ip, port), ip.String(), port,
			" (a connection to an address, not a name, needs a rule naming the address)")
	}
	if c.refused {
		if c.never {
			return refusal(ip, c, "")
		}
		// A broad range such as 0.0.0.0/0:443 was written to mean "the internet", not
		// the metadata service; only a rule inside the refused range counts as naming it.
		if !r.names(c) {
			return refusal(ip, c, fmt.Sprintf("; allow rule %s is broader than that range, so name the address or a range inside it", r.text))
		}
	}
	icpt, how := p.intercept(ip.String(), r.ports.bare)
	return Decision{Verdict: Allow, Rule: r.text, Intercept: icpt,
		Reason: fmt.Sprintf("address %s port %d matches allow rule %s; %s", ip, port, r.text, how)}
}

// precheck canonicalises ip and applies the checks no rule can lift (invalid input, the
// gateway's own addresses) and the deny rules.
func (p *Policy) precheck(ip netip.Addr, port uint16) (netip.Addr, class, Decision, bool) {
	if !ip.IsValid() {
		return ip, class{}, Decision{Verdict: Deny, Rule: ruleInvalid, Reason: "the address is not a valid IP address"}, true
	}
	// IPv4-mapped IPv6 reaches the IPv4 host on dual-stack sockets, so it is that host.
	ip = ip.WithZone("").Unmap()
	if port == 0 {
		return ip, class{}, Decision{Verdict: Deny, Rule: ruleInvalid, Reason: fmt.Sprintf("address %s port 0 cannot be dialled", ip)}, true
	}
	c := classify(ip)
	for _, g := range p.gateway {
		if (g.Addr() == ip || (c.inner.IsValid() && g.Addr() == c.inner)) && (g.Port() == 0 || g.Port() == port) {
			return ip, c, Decision{Verdict: Deny, Rule: ruleGateway,
				Reason: fmt.Sprintf("address %s port %d is the gateway's own and is never dialled", ip, port)}, true
		}
	}
	match := func(r *hostRule) bool { return r.prefix.Contains(ip) }
	if r := pick(p.deny, kindIP, match, port, true); r != nil {
		return ip, c, Decision{Verdict: Deny, Rule: r.text, Reason: fmt.Sprintf("address %s matches deny rule %s", ip, r.text)}, true
	}
	if r := pick(p.deny, kindCIDR, match, port, true); r != nil {
		return ip, c, Decision{Verdict: Deny, Rule: r.text, Reason: fmt.Sprintf("address %s matches deny rule %s", ip, r.text)}, true
	}
	return ip, c, Decision{}, false
}

// allowIP finds the allow rule for an address and port: exact addresses before CIDRs.
func (p *Policy) allowIP(ip netip.Addr, port uint16) *hostRule {
	match := func(r *hostRule) bool { return r.prefix.Contains(ip) }
	if r := pick(p.allow, kindIP, match, port, false); r != nil {
		return r
	}
	return pick(p.allow, kindCIDR, match, port, false)
}

func refusal(ip netip.Addr, c class, extra string) Decision {
	tail := " and no rule names it"
	if c.never {
		tail = " and is never dialled"
	}
	if extra != "" {
		tail = extra
	}
	return Decision{Verdict: Deny, Rule: "class:" + c.name, Reason: fmt.Sprintf("address %s is %s%s", ip, c.describe(), tail)}
}

// BrokerHost is the name under which the gateway itself serves the sandbox
// (its broker: /v1/info, later MCP and host commands). No rule can send it
// out: Host and Name deny it with rule "broker", whatever the rules and the
// default say, so a gateway without a broker fails closed and one with a
// broker must recognise the name (IsBroker) before asking policy.
const BrokerHost = "airlock.internal"

// IsBroker reports whether name is BrokerHost in any spelling DNS treats as
// the same name: any case, with or without the trailing dot.
func IsBroker(name string) bool {
	n, err := NormalizeName(name)
	return err == nil && n == BrokerHost
}

var brokerDecision = Decision{Verdict: Deny, Rule: ruleBroker,
	Reason: BrokerHost + " is served by the gateway itself and is never dialled"}

const (
	ruleBroker   = "broker"
	ruleDefault  = "default"
	ruleInvalid  = "invalid"
	ruleExplicit = "explicit"
	ruleGateway  = "gateway"
)

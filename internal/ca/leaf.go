package ca

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	leafValidity = 7 * 24 * time.Hour
	// Renewing a day early means no handshake ever gets a leaf about to
	// expire under a client whose clock runs a little fast.
	leafRenewBefore = 24 * time.Hour
	// defaultMaxLeaves bounds memory: a sandbox can make the gateway see any
	// number of distinct names, but only allowed hosts get this far.
	defaultMaxLeaves = 1024

	maxHostLen  = 253
	maxLabelLen = 63
	// cnMaxLen is the X.520 upper bound on a CommonName.
	cnMaxLen = 64
)

// errMintAborted is what waiters see if the minting goroutine panicked.
var errMintAborted = errors.New("ca: mint leaf: aborted")

// leafCache is a bounded LRU of minted leaves plus the in-flight mints, so
// concurrent handshakes for one host share a single signature.
type leafCache struct {
	mu       sync.Mutex
	max      int
	lru      *list.List // of *leafEntry, most recently used at the front
	byHost   map[string]*list.Element
	inflight map[string]*mintCall

	now   func() time.Time // swapped by tests to age leaves
	mints atomic.Int64     // leaves minted, for tests
}

type leafEntry struct {
	host     string
	cert     *tls.Certificate
	notAfter time.Time
}

type mintCall struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

func newLeafCache(max int) *leafCache {
	return &leafCache{
		max:      max,
		lru:      list.New(),
		byHost:   make(map[string]*list.Element),
		inflight: make(map[string]*mintCall),
		now:      time.Now,
	}
}

// WithDefaultHost returns a view of c whose GetCertificate mints for host
// when the ClientHello carries no SNI (clients send none for IP literals).
// The view shares c's key and leaf cache. An invalid host is reported by
// GetCertificate, not here.
func (c *CA) WithDefaultHost(host string) *CA {
	v := *c
	v.defaultHost = host
	return &v
}

// GetCertificate is a tls.Config.GetCertificate that mints for the
// ClientHello's SNI. Without SNI it uses the WithDefaultHost host, and
// without one of those it fails, so the gateway refuses the connection
// rather than guess.
func (c *CA) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	host := ""
	if hello != nil {
		host = hello.ServerName
	}
	if host == "" {
		host = c.defaultHost
	}
	if host == "" {
		return nil, errors.New("ca: client sent no SNI and no default host is set")
	}
	return c.Leaf(host)
}

// Leaf returns a certificate for host, a DNS name or an IP literal (which
// gets an IP SAN), signed by the CA: ECDSA P-256, ServerAuth, valid from an
// hour ago for 7 days. Leaves are cached (LRU, 1024 hosts) and re-minted
// within a day of expiry; concurrent calls for one host mint once. Names are
// matched case-insensitively and may carry one trailing dot. Wildcards,
// empty or over-long labels, non-ASCII (use the xn-- form) and IP zones are
// errors: the gateway always asks for an exact host.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	name, ip, err := normalizeHost(host)
	if err != nil {
		return nil, err
	}
	key := name
	if ip.IsValid() {
		key = ip.String()
	}
	lc := c.leaves
	now := lc.now()

	lc.mu.Lock()
	if el, ok := lc.byHost[key]; ok {
		e := el.Value.(*leafEntry)
		if now.Add(leafRenewBefore).Before(e.notAfter) {
			lc.lru.MoveToFront(el)
			lc.mu.Unlock()
			return e.cert, nil
		}
	}
	if call, ok := lc.inflight[key]; ok {
		lc.mu.Unlock()
		<-call.done
		return call.cert, call.err
	}
	call := &mintCall{done: make(chan struct{}), err: errMintAborted}
	lc.inflight[key] = call
	lc.mu.Unlock()

	// Deferred so waiters are released even if minting panics.
	defer func() {
		lc.mu.Lock()
		delete(lc.inflight, key)
		if call.err == nil {
			lc.add(key, call.cert)
		}
		lc.mu.Unlock()
		close(call.done)
	}()
	call.cert, call.err = c.mint(name, ip, now)
	return call.cert, call.err
}

// add caches cert for host, evicting the least recently used beyond max.
// lc.mu must be held.
func (lc *leafCache) add(host string, cert *tls.Certificate) {
	e := &leafEntry{host: host, cert: cert, notAfter: cert.Leaf.NotAfter}
	if el, ok := lc.byHost[host]; ok {
		el.Value = e
		lc.lru.MoveToFront(el)
	} else {
		lc.byHost[host] = lc.lru.PushFront(e)
	}
	for lc.lru.Len() > lc.max {
		old := lc.lru.Back()
		lc.lru.Remove(old)
		delete(lc.byHost, old.Value.(*leafEntry).host)
	}
}

func (c *CA) mint(name string, ip netip.Addr, now time.Time) (*tls.Certificate, error) {
	c.leaves.mints.Add(1)
	// Leaves never outlive the CA's own validity: clients would reject the
	// chain anyway, and this makes the renewal check see the real end.
	notBefore := now.Add(-backdate)
	if notBefore.Before(c.cert.NotBefore) {
		notBefore = c.cert.NotBefore
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("ca: mint leaf: CA certificate %s expired on %s", c.path, c.cert.NotAfter.Format(time.DateOnly))
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	// A fresh key per leaf: a leaf key leaked from the gateway's memory then
	// speaks for one host only.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: mint leaf: generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
		tmpl.Subject = pkix.Name{CommonName: ip.String()}
	} else {
		tmpl.DNSNames = []string{name}
		// Clients match the SAN; the CN is only for humans reading the chain.
		if len(name) <= cnMaxLen {
			tmpl.Subject = pkix.Name{CommonName: name}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("ca: mint leaf: sign: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: mint leaf: parse: %w", err)
	}
	// The chain is the leaf alone: the sandbox already holds the CA as a
	// root, and sending it too would only add bytes to every handshake.
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// normalizeHost validates host and returns either its lower-case DNS name
// without a trailing dot, or its IP address (IPv4-mapped IPv6 unmapped).
func normalizeHost(host string) (string, netip.Addr, error) {
	if host == "" {
		return "", netip.Addr{}, errors.New("ca: empty host")
	}
	if len(host) > maxHostLen+1 {
		return "", netip.Addr{}, fmt.Errorf("ca: host %s is longer than %d bytes", quoteHost(host), maxHostLen)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("ca: host %s: IP zones cannot be certified", quoteHost(host))
		}
		return "", ip.Unmap(), nil
	}
	name := host
	if name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}
	if name == "" || len(name) > maxHostLen {
		return "", netip.Addr{}, fmt.Errorf("ca: invalid host %s: length", quoteHost(host))
	}
	b := []byte(name)
	labelStart := 0
	for i := 0; i <= len(b); i++ {
		if i < len(b) && b[i] != '.' {
			ch := b[i]
			switch {
			case 'A' <= ch && ch <= 'Z':
				b[i] = ch + ('a' - 'A')
			case 'a' <= ch && ch <= 'z', '0' <= ch && ch <= '9', ch == '_':
			case ch == '-':
				if i == labelStart {
					return "", netip.Addr{}, fmt.Errorf("ca: invalid host %s: label starts with '-'", quoteHost(host))
				}
			default:
				// Covers '*': wildcards are never minted, the gateway
				// knows the exact host.
				return "", netip.Addr{}, fmt.Errorf("ca: invalid host %s: bad character %q", quoteHost(host), rune(ch))
			}
			continue
		}
		if n := i - labelStart; n == 0 || n > maxLabelLen {
			return "", netip.Addr{}, fmt.Errorf("ca: invalid host %s: label length", quoteHost(host))
		}
		labelStart = i + 1
	}
	// An all-numeric last label is no DNS name but an IP in a notation
	// netip rejects ("1.2.3.999", "010.1.1.1"); clients would not match it.
	last := b[lastDot(b)+1:]
	if allDigits(last) {
		return "", netip.Addr{}, fmt.Errorf("ca: invalid host %s: not a DNS name nor an IP address", quoteHost(host))
	}
	return string(b), netip.Addr{}, nil
}

func lastDot(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '.' {
			return i
		}
	}
	return -1
}

func allDigits(b []byte) bool {
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return false
		}
	}
	return len(b) > 0
}

// quoteHost quotes host for an error, cut short so a hostile name cannot
// blow up logs.
func quoteHost(host string) string {
	const max = 80
	if len(host) > max {
		return strconv.Quote(host[:max]) + "..."
	}
	return strconv.Quote(host)
}

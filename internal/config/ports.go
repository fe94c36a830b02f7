package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Published is one published port (-p, ports:): connections to Host on the
// host are carried to the sandbox's port Sandbox. A Host port of 0 is one
// the host picks (docker's -p SANDBOX_PORT), shown by airlock port.
type Published struct {
	Host    netip.AddrPort
	Sandbox uint16
}

// DefaultPublishIP is where a published port listens when -p names no
// address: this host alone.
var DefaultPublishIP = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// publishForm is what -p takes, for errors.
const publishForm = "use [HOST_IP:]HOST_PORT:SANDBOX_PORT, e.g. 8000:8000 or 127.0.0.1:3000:3000 (or SANDBOX_PORT alone: a free host port on 127.0.0.1)"

// ParsePublished reads docker's -p forms: SANDBOX_PORT, HOST_PORT:SANDBOX_PORT,
// HOST_IP:HOST_PORT:SANDBOX_PORT and HOST_IP::SANDBOX_PORT, each optionally
// ending in /tcp; an IPv6 HOST_IP is written in brackets. Without HOST_IP
// the port listens on 127.0.0.1 (docker's default, every address, is not
// airlock's: another address must be named).
func ParsePublished(s string) (Published, error) {
	var p Published
	rest := s
	if r, proto, ok := strings.Cut(s, "/"); ok {
		if proto != "tcp" {
			return p, fmt.Errorf("%q: only TCP ports can be published (/tcp, or nothing)", s)
		}
		rest = r
	}
	ip := DefaultPublishIP
	named := false // HOST_IP given
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]")
		if end < 0 || len(rest) == end+1 || rest[end+1] != ':' || !strings.Contains(rest[end+2:], ":") {
			return p, fmt.Errorf("%q: %s", s, publishForm)
		}
		a, err := netip.ParseAddr(rest[1:end])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return p, fmt.Errorf("%q: %q is not an IPv6 address: %s", s, rest[1:end], publishForm)
		}
		ip, rest, named = a, rest[end+2:], true
	}
	parts := strings.Split(rest, ":")
	if len(parts) == 3 && !named {
		a, err := netip.ParseAddr(parts[0])
		if err != nil || !a.Is4() {
			return p, fmt.Errorf("%q: %q is not an IP address: %s", s, parts[0], publishForm)
		}
		ip, parts, named = a, parts[1:], true
	}
	if len(parts) > 2 || (len(parts) == 1 && named) {
		return p, fmt.Errorf("%q: %s", s, publishForm)
	}
	sp, err := portNumber(parts[len(parts)-1])
	if err != nil {
		return p, fmt.Errorf("%q: the sandbox's port %w", s, err)
	}
	p.Sandbox = sp
	var hp uint16 // 0: the host picks (SANDBOX_PORT alone, or HOST_IP::SANDBOX_PORT)
	if len(parts) == 2 && (parts[0] != "" || !named) {
		if hp, err = portNumber(parts[0]); err != nil {
			return p, fmt.Errorf("%q: the host's port %w", s, err)
		}
	}
	p.Host = netip.AddrPortFrom(ip.Unmap(), hp)
	return p, nil
}

// portNumber reads a port in 1–65535.
func portNumber(s string) (uint16, error) {
	if s == "" {
		return 0, errors.New("is missing: " + publishForm)
	}
	if strings.Contains(s, "-") && !strings.HasPrefix(s, "-") {
		return 0, errors.New(s + " is a range: publish one port per -p")
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%s is not a port: use a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// Loopback reports whether p listens on this host alone.
func (p Published) Loopback() bool { return p.Host.Addr().IsLoopback() }

// String is p in -p's form, the host address always written.
func (p Published) String() string {
	return p.Host.String() + ":" + strconv.Itoa(int(p.Sandbox))
}

package config

import (
	"strings"
	"testing"
)

func TestParsePublished(t *testing.T) {
	cases := map[string]struct {
		in, want, err string // want: the entry's String
	}{
		"host and sandbox port listen on loopback":   {in: "8000:80", want: "127.0.0.1:8000:80"},
		"an address given is kept":                   {in: "0.0.0.0:8000:80", want: "0.0.0.0:8000:80"},
		"another loopback address":                   {in: "127.0.0.2:8000:80", want: "127.0.0.2:8000:80"},
		"an IPv6 address in brackets":                {in: "[::1]:8000:80", want: "[::1]:8000:80"},
		"the sandbox port alone takes a free port":   {in: "80", want: "127.0.0.1:0:80"},
		"an address with no host port takes one too": {in: "127.0.0.1::80", want: "127.0.0.1:0:80"},
		"IPv6 with no host port":                     {in: "[::1]::80", want: "[::1]:0:80"},
		"/tcp is accepted":                           {in: "8000:80/tcp", want: "127.0.0.1:8000:80"},
		"a YAML integer":                             {in: "3000", want: "127.0.0.1:0:3000"},
		"UDP is refused":                             {in: "53:53/udp", err: "only TCP"},
		"a port above 65535":                         {in: "70000:80", err: "70000 is not a port"},
		"port 0 on the host":                         {in: "0:80", err: "the host's port 0 is not a port"},
		"port 0 inside":                              {in: "8000:0", err: "the sandbox's port 0 is not a port"},
		"a negative port":                            {in: "-1:80", err: "not a port"},
		"a range":                                    {in: "8000-8001:80-81", err: "is a range"},
		"a name for the address":                     {in: "localhost:8000:80", err: "not an IP address"},
		"too many parts":                             {in: "1:2:3:4", err: "use [HOST_IP:]"},
		"nothing":                                    {in: "", err: "is missing"},
		"a lone colon":                               {in: ":", err: "is missing"},
		"an IPv6 address without brackets":           {in: "::1:8000:80", err: "use [HOST_IP:]"},
		"brackets with no port after":                {in: "[::1]:80", err: "use [HOST_IP:]"},
		"an IPv4 address in brackets":                {in: "[127.0.0.1]:8000:80", err: "not an IPv6 address"},
	}
	for name, c := range cases {
		p, err := ParsePublished(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: ParsePublished(%q) = %v, %v; want an error with %q", name, c.in, p, err, c.err)
			}
			continue
		}
		if err != nil || p.String() != c.want {
			t.Errorf("%s: ParsePublished(%q) = %q, %v; want %q", name, c.in, p, err, c.want)
		}
	}
}

func TestPublishedLoopback(t *testing.T) {
	for in, want := range map[string]bool{"80": true, "127.0.0.9:1:2": true, "[::1]:1:2": true, "0.0.0.0:1:2": false, "[::]:1:2": false, "192.168.1.5:1:2": false} {
		p, err := ParsePublished(in)
		if err != nil || p.Loopback() != want {
			t.Errorf("ParsePublished(%q).Loopback() = %v (%v), want %v", in, p.Loopback(), err, want)
		}
	}
}

func FuzzParsePublished(f *testing.F) {
	for _, s := range []string{"8000:80", "[::1]::80", "0.0.0.0:1:2/tcp", "80", "1:2:3:4", "[", "[]:", "::::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePublished(s)
		if err != nil {
			return
		}
		if p.Sandbox == 0 {
			t.Fatalf("ParsePublished(%q) accepted sandbox port 0", s)
		}
		// What it accepted reads back the same.
		q, err := ParsePublished(p.String())
		if p.Host.Port() != 0 && (err != nil || q != p) {
			t.Fatalf("ParsePublished(%q) = %v, which reads back as %v, %v", s, p, q, err)
		}
	})
}

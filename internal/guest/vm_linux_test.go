package guest

import (
	"strings"
	"testing"
)

func TestParseCmdline(t *testing.T) {
	for name, c := range map[string]struct {
		in, err, ip, root, fs string
		mtu                   int
	}{
		"defaults":            {in: "console=ttyS0 quiet", root: "/dev/vda", fs: "ext4"},
		"the host's choices":  {in: "airlock.root=/dev/vdb airlock.rootfs=erofs airlock.ip=10.0.2.15/24 airlock.gw=10.0.2.2 airlock.mtu=9000", root: "/dev/vdb", fs: "erofs", ip: "10.0.2.15/24", mtu: 9000},
		"an unknown root fs":  {in: "airlock.rootfs=9p", err: "use ext4 or erofs"},
		"a silly MTU":         {in: "airlock.ip=10.0.0.2/24 airlock.mtu=12", err: "not an MTU"},
		"a default MTU of IP": {in: "airlock.ip=10.0.0.2/24", root: "/dev/vda", fs: "ext4", ip: "10.0.0.2/24", mtu: 1500},
	} {
		p, err := parseCmdline(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err = %v, want %q", name, err, c.err)
			}
			continue
		}
		if err != nil || p.root != c.root || p.rootFS != c.fs {
			t.Errorf("%s: %+v, %v", name, p, err)
		}
		if (p.net == nil) != (c.ip == "") || (p.net != nil && (p.net.Addr != c.ip || p.net.MTU != c.mtu || p.net.Device != "eth0")) {
			t.Errorf("%s: net %+v, want %s mtu %d", name, p.net, c.ip, c.mtu)
		}
	}
}

package guest

import (
	"fmt"
	"net"
	"os"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/internal/proto"
)

// makeTAP creates the sandbox's network interface in the guest's network
// namespace (the guest still holds CAP_NET_ADMIN there) and returns the
// device's descriptor for the host. It must run before the root is pivoted:
// the sandbox's /dev has no /dev/net/tun, so nothing inside can make another.
func makeTAP(n *proto.Net, sent []*os.File) (*os.File, error) {
	var fd int
	var err error
	if n.FD > 0 && n.FD <= len(sent) {
		// Opened by the host in our network namespace (see proto.Net.FD).
		fd, err = unix.FcntlInt(sent[n.FD-1].Fd(), unix.F_DUPFD_CLOEXEC, 0)
	} else {
		fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, step("open /dev/net/tun", err)
	}
	f := os.NewFile(uintptr(fd), "tap")
	ifr, err := unix.NewIfreq(n.Device)
	if err != nil {
		f.Close()
		return nil, step("TAP name", err)
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(ifr))); errno != 0 {
		f.Close()
		return nil, step("create TAP device", errno)
	}
	if err := configure(n); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// configure gives the interface its address, MTU and the default route, and
// turns IPv6 off on it: the gateway speaks IPv4 only, and an interface with
// only a link-local v6 address would just make clients try v6 first.
func configure(n *proto.Net) error {
	link, err := netlink.LinkByName(n.Device)
	if err != nil {
		return step("find "+n.Device, err)
	}
	addr, err := netlink.ParseAddr(n.Addr)
	if err != nil {
		return step("sandbox address", err)
	}
	gw := net.ParseIP(n.Gateway)
	if gw == nil {
		return step("gateway address", fmt.Errorf("%q is not an IP address", n.Gateway))
	}
	os.WriteFile("/proc/sys/net/ipv6/conf/"+n.Device+"/disable_ipv6", []byte("1"), 0) // best effort
	if err := netlink.LinkSetMTU(link, n.MTU); err != nil {
		return step("set MTU", err)
	}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return step("set address", err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return step("bring "+n.Device+" up", err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw}); err != nil {
		return step("default route", err)
	}
	return nil
}

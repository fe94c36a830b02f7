package guest

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// unplug deletes every network interface of the sandbox's network
// namespace but loopback (a Pod's veth: deleting its end deletes the pair),
// and checks that none is left. With the capabilities gone right after,
// nothing inside can make another: the sandbox's only way out is then the
// relay the guest serves over its control connection.
func unplug() error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" {
			continue
		}
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("delete %s: %w", l.Attrs().Name, err)
		}
	}
	links, err = netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			return fmt.Errorf("%s is still there", l.Attrs().Name)
		}
	}
	return nil
}

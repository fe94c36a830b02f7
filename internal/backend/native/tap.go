package native

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// TUNDevice is where TAP devices come from.
const TUNDevice = "/dev/net/tun"

// CanMakeTAP says whether a sandbox started by this user can get a TAP
// interface (the transparent network), and if not, why. The guest opens the
// device with the caller's own identity: the user namespace grants
// CAP_NET_ADMIN over the sandbox's network, not access to host device nodes.
func CanMakeTAP() error {
	err := unix.Access(TUNDevice, unix.R_OK|unix.W_OK)
	if err == nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Stat(TUNDevice, &st) != nil {
		return fmt.Errorf("%s does not exist on this host (load the tun module)", TUNDevice)
	}
	return fmt.Errorf("%s is mode %04o owned by uid %d, so uid %d cannot open it", TUNDevice, st.Mode&0o7777, st.Uid, os.Getuid())
}

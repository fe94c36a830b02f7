//go:build linux && !airlock_native_guest

package guest

import (
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/internal/vfs"
)

// relayShares mounts the host's files over FUSE at sharesMount, each
// request relayed to the host on port.
func relayShares(port *os.File) error {
	dev, err := vfs.MountFUSE(sharesMount)
	if err != nil {
		port.Close()
		return step("mount the host's files", err)
	}
	go func() {
		if err := vfs.GuestRelay(dev, port); err != nil {
			fmt.Fprintln(os.Stderr, "airlock guest: file relay:", err)
		}
		dev.Close()
	}()
	return nil
}

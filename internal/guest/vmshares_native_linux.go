//go:build linux && airlock_native_guest

package guest

import (
	"errors"
	"os"
)

// relayShares: a guest built for the native backend alone (the lean guest,
// internal/guestbin) holds no FUSE server, and never boots a VM.
func relayShares(port *os.File) error {
	port.Close()
	return step("mount the host's files", errors.New("this guest is built for the native backend only"))
}

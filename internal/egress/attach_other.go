//go:build !linux

package egress

import (
	"errors"

	"github.com/airlock-dev/airlock/internal/link"
)

// Attach would start the transparent door; its netstack is Linux's (gVisor's
// link endpoints), so elsewhere a sandbox uses the explicit proxy.
func (nw *Egress) Attach(l link.Link) error {
	l.File.Close()
	return errors.New("egress: the transparent network is not supported on this OS (use network mode proxy)")
}

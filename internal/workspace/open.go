package workspace

import "github.com/airlock-dev/airlock/internal/beneath"

// openBeneath opens rel under the directory root with no symlink on the
// way, no escape, no mount crossed, no /proc magic: everything under a root
// the sandbox wrote is opened so (internal/beneath).
func openBeneath(root int, rel string, flags int) (int, error) {
	return beneath.Open(root, rel, flags, beneath.Strict)
}

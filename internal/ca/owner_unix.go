//go:build unix

package ca

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// checkOwner refuses a key someone else owns: they could read it, or have
// planted it so that the sandbox trusts a CA whose key they hold.
func checkOwner(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("ca: key %s is owned by uid %d, not the current user (uid %d)", path, st.Uid, uid)
	}
	return nil
}

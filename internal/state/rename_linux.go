package state

import "golang.org/x/sys/unix"

// renameNoReplace renames, failing with EEXIST where the target exists.
func renameNoReplace(from, to string) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
}

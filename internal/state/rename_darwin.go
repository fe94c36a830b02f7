package state

import "golang.org/x/sys/unix"

// renameNoReplace renames, failing with EEXIST where the target exists.
func renameNoReplace(from, to string) error {
	return unix.RenamexNp(from, to, unix.RENAME_EXCL)
}

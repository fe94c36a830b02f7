package workspace

import "golang.org/x/sys/unix"

// openNoSymlinks opens the directory at absolute path p, refusing a
// symlink in any component (O_NOFOLLOW_ANY, macOS 11 and later).
func openNoSymlinks(p string) (int, error) {
	return unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW_ANY, 0)
}

// renameNoReplace renames, failing with EEXIST where the target exists.
func renameNoReplace(fromfd int, from string, tofd int, to string) error {
	return unix.RenameatxNp(fromfd, from, tofd, to, unix.RENAME_EXCL)
}

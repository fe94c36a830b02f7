//go:build !unix

package ca

import "io/fs"

// checkOwner has no portable owner to compare outside Unix; there the
// user's profile directory ACLs are what keep the key private.
func checkOwner(path string, fi fs.FileInfo) error { return nil }

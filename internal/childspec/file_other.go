//go:build !linux

package childspec

import (
	"io"
	"os"
)

// specFile is b in a private temporary file unlinked at once, read from its
// start.
func specFile(b []byte) (*os.File, error) {
	f, err := os.CreateTemp("", "airlock-childspec-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

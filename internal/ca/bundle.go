package ca

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// systemBundles are the host's PEM root bundles, most common first (the
// list crypto/x509 searches on Linux, plus macOS's /etc/ssl/cert.pem).
// A var so tests can point it at their own files.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian, Ubuntu, Arch, Gentoo
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora, RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // openSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS, RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine, macOS
}

// Bundle returns the host's system roots (the first readable bundle holding
// a certificate among the usual paths) followed by the CA's PEM: the file
// mounted into the sandbox over the system bundle paths, so that tools in it
// trust intercepted connections and still trust any they reach directly.
// Without a system bundle it returns the CA alone: every connection leaves
// through the gateway, so the sandbox still works.
func (c *CA) Bundle() ([]byte, error) {
	var out []byte
	for _, p := range systemBundles {
		data, err := os.ReadFile(p)
		// Unreadable or empty (a dangling link, a directory, a placeholder)
		// just means "try the next one".
		if err != nil || !bytes.Contains(data, []byte("-----BEGIN CERTIFICATE-----")) {
			continue
		}
		out = data
		break
	}
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, c.certPEM...), nil
}

// Bundle files: one per content, shared by every sandbox.
const (
	bundlePrefix = "ca-bundle-"
	bundleSuffix = ".pem"
	// maxBundleSize bounds the read of an existing file (a system bundle is
	// about 225 KB).
	maxBundleSize = 16 << 20
	// staleBundle is how long a bundle nobody reached for stays once a newer
	// one is written (the CA or the system's roots changed): a sandbox
	// holds its own by its mount, so only one about to start could want it.
	staleBundle = time.Hour
)

// BundleFile returns the path of a file holding Bundle's content under dir,
// named by the content's SHA-256: every sandbox with this CA and these
// system roots shares the one file, read-only (mode 0444; dir is made
// 0700), where each used to write a private 225 KB copy. It is written once,
// atomically (a temporary file renamed into place), so a reader sees all of
// it or nothing; a file already there is used only if it holds exactly that
// content, and is replaced otherwise. Writing a new one removes the bundles
// of earlier contents that no sandbox reached for in the last hour.
func (c *CA) BundleFile(dir string) (string, error) {
	data, err := c.Bundle()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	p := filepath.Join(dir, bundlePrefix+hex.EncodeToString(sum[:])+bundleSuffix)
	if same(p, data) {
		// Marks it in use, so the clean-up below leaves it be.
		now := time.Now()
		_ = os.Chtimes(p, now, now)
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("ca: bundle dir: %w", err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"bundle-*")
	if err != nil {
		return "", fmt.Errorf("ca: write bundle: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Chmod(0o444)
	if err := errors.Join(werr, cerr, f.Close()); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("ca: write bundle: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("ca: write bundle: %w", err)
	}
	removeStaleBundles(dir, filepath.Base(p))
	return p, nil
}

// same reports whether p is a regular file (not a link) holding data.
func same(p string, data []byte) bool {
	st, err := os.Lstat(p)
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(len(data)) || st.Size() > maxBundleSize {
		return false
	}
	got, err := os.ReadFile(p)
	return err == nil && bytes.Equal(got, data)
}

// removeStaleBundles removes dir's other bundles (and their Java trust
// stores) unused for staleBundle, and temporary files a crash left as long
// ago.
func removeStaleBundles(dir, keep string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range ents {
		n := de.Name()
		ours := strings.HasPrefix(n, bundlePrefix) && strings.HasSuffix(n, bundleSuffix) || strings.HasPrefix(n, tmpPrefix+"bundle-") ||
			strings.HasPrefix(n, trustStorePrefix) && strings.HasSuffix(n, trustStoreSuffix) || strings.HasPrefix(n, tmpPrefix+"truststore-")
		if n == keep || n == trustStoreOf(keep) || !ours {
			continue
		}
		if fi, err := de.Info(); err == nil && time.Since(fi.ModTime()) > staleBundle {
			os.Remove(filepath.Join(dir, n))
		}
	}
}

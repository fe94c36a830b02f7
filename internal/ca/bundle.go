package ca

import (
	"bytes"
	"os"
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

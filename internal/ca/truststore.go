package ca

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"software.sslmate.com/src/go-pkcs12"
)

// TrustStorePassword opens the Java trust store. It is no secret: the file
// holds public certificates only, and Java wants a password to check the
// PKCS#12 file's integrity MAC.
const TrustStorePassword = "airlock"

// Trust store files: one per bundle, beside it.
const (
	trustStorePrefix = "ca-truststore-"
	trustStoreSuffix = ".p12"
	// maxTrustStoreCerts bounds what one bundle may hold (a system bundle
	// holds about 150).
	maxTrustStoreCerts = 4096
)

// TrustStoreFile returns a PKCS#12 trust store (what a JVM reads through
// -Djavax.net.ssl.trustStore) holding every certificate of the bundle file
// at bundlePath, which BundleFile wrote: the system's roots plus the CA's,
// so a JVM in the sandbox trusts intercepted connections without losing
// the roots it had. It is named after the bundle (whose name is its
// content's hash) and made once, atomically, read-only, in the bundle's
// directory (which no sandbox sees): later sandboxes with the same bundle
// reuse it, paying no PBKDF2 or certificate parsing at start.
func TrustStoreFile(bundlePath string) (string, error) {
	dir, name := filepath.Split(bundlePath)
	sum, ok := strings.CutPrefix(strings.TrimSuffix(name, bundleSuffix), bundlePrefix)
	if !ok || sum == "" {
		return "", fmt.Errorf("ca: java trust store: %s is not a bundle BundleFile wrote", bundlePath)
	}
	p := filepath.Join(dir, trustStoreOf(name))
	if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		now := time.Now()
		_ = os.Chtimes(p, now, now) // in use: the clean-up leaves it be
		return p, nil
	}
	data, err := readBounded(bundlePath, maxBundleSize)
	if err != nil {
		return "", fmt.Errorf("ca: java trust store: read bundle: %w", err)
	}
	certs, err := pemCerts(data)
	if err != nil {
		return "", fmt.Errorf("ca: java trust store: %w", err)
	}
	pfx, err := pkcs12.Modern2023.EncodeTrustStore(certs, TrustStorePassword)
	if err != nil {
		return "", fmt.Errorf("ca: java trust store: encode: %w", err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"truststore-*")
	if err != nil {
		return "", fmt.Errorf("ca: java trust store: write: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(pfx)
	cerr := f.Chmod(0o444)
	if err := errors.Join(werr, cerr, f.Close()); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("ca: java trust store: write: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err // the paths are in the message already
		}
		return "", fmt.Errorf("ca: java trust store: write %s: %w (remove what is there, or set AIRLOCK_STATE_DIR to another directory)", p, err)
	}
	return p, nil
}

// pemCerts parses the certificates of a PEM bundle, skipping blocks that are
// not certificates or that Go cannot parse (a system bundle may carry one
// with an old encoding; the JVM would not miss what it could not use).
func pemCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for len(data) > 0 {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			continue
		}
		if len(certs) == maxTrustStoreCerts {
			return nil, fmt.Errorf("the bundle holds more than %d certificates", maxTrustStoreCerts)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("the bundle holds no certificate")
	}
	return certs, nil
}

// readBounded reads a regular file of at most max bytes.
func readBounded(p string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, max)
	}
	return data, nil
}

// trustStoreOf names the trust store made from the bundle named bundle.
func trustStoreOf(bundle string) string {
	sum := strings.TrimSuffix(strings.TrimPrefix(bundle, bundlePrefix), bundleSuffix)
	return trustStorePrefix + sum + trustStoreSuffix
}

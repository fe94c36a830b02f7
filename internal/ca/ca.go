// Package ca keeps airlock's local certificate authority and mints cached per-host leaf certificates for TLS interception.
package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

const (
	certName = "ca.pem"
	keyName  = "ca-key.pem"

	caValidity = 10 * 365 * 24 * time.Hour
	// Backdating absorbs clock skew between the host and a sandbox or VM
	// guest whose clock lags a little behind.
	backdate = time.Hour

	// A PEM key or certificate is a few hundred bytes; the cap only stops a
	// swapped-in huge file from being read whole.
	maxPEMSize = 64 << 10

	// tmpPrefix names the files written before being linked into place.
	tmpPrefix = ".tmp-"
	// Temp files older than this are leftovers of a crashed Load; younger
	// ones may belong to a Load running right now in another process.
	staleTmpAge = 10 * time.Minute
)

// Dir returns where the CA lives: $AIRLOCK_CONFIG_DIR, else os.UserConfigDir()/airlock (files ca.pem and ca-key.pem).
func Dir() (string, error) {
	if d := os.Getenv("AIRLOCK_CONFIG_DIR"); d != "" {
		return d, nil
	}
	cfg, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("ca: config dir: %w", err)
	}
	return filepath.Join(cfg, "airlock"), nil
}

// CA is airlock's local certificate authority. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	path    string

	// defaultHost is minted for ClientHellos without SNI (see WithDefaultHost).
	defaultHost string
	// leaves is shared by every view WithDefaultHost returns, so they mint
	// each host once between them.
	leaves *leafCache
}

// Load loads the CA from dir, creating it on first use.
//
// A new CA has an ECDSA P-256 key and a self-signed certificate (CN "airlock
// local CA <random>", valid 10 years, CA with path length 0 so it can sign
// leaves but not intermediates, no name constraints because the gateway mints
// for any host). The key is written 0600 in a 0700 dir.
//
// Concurrent Loads, in one process or many, end up with one CA: each file is
// written to a temp file and hard-linked into place, which fails if the name
// exists, and the loser of a race reads the winner's file. The key is always
// published before the certificate, so a crash in between leaves a key that
// the next Load completes with a certificate.
//
// Load refuses a key file that is group/world readable or not owned by the
// current user, a certificate that does not match the key, and an expired CA.
func Load(dir string) (*CA, error) {
	if dir == "" {
		return nil, errors.New("ca: load: empty dir")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("ca: load: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca: create dir: %w", err)
	}
	removeStaleTemps(dir)

	keyPath := filepath.Join(dir, keyName)
	certPath := filepath.Join(dir, certName)

	key, err := loadOrCreateKey(dir, keyPath, certPath)
	if err != nil {
		return nil, err
	}
	cert, certPEM, err := loadOrCreateCert(dir, certPath, key)
	if err != nil {
		return nil, err
	}
	if err := checkPair(cert, key, certPath, keyPath, time.Now()); err != nil {
		return nil, err
	}
	return &CA{
		cert:    cert,
		certPEM: certPEM,
		key:     key,
		path:    certPath,
		leaves:  newLeafCache(defaultMaxLeaves),
	}, nil
}

// CertPEM returns the CA certificate in PEM form, for `airlock ca` and for the sandbox's trust bundle.
func (c *CA) CertPEM() []byte { return bytes.Clone(c.certPEM) }

// Path returns the absolute path of ca.pem.
func (c *CA) Path() string { return c.path }

// Certificate returns the parsed CA certificate; callers must not modify it.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// loadOrCreateKey returns the key at keyPath, creating it if missing. The
// loop only repeats when another process published a key between our read
// and our link, and someone deleted it again before we could read it.
func loadOrCreateKey(dir, keyPath, certPath string) (*ecdsa.PrivateKey, error) {
	for range 3 {
		key, err := readKey(keyPath)
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		// The key is published first, so a certificate without one is not a
		// race in progress but a deleted key: a fresh key could never match.
		// (Unless another process published both since our read: look again.)
		if _, err := os.Lstat(certPath); err == nil {
			if key, err := readKey(keyPath); err == nil {
				return key, nil
			}
			return nil, fmt.Errorf("ca: %s exists without %s: remove it to create a new CA", certPath, keyPath)
		}
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("ca: generate key: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("ca: encode key: %w", err)
		}
		data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
		won, err := publish(dir, keyPath, data, 0o600)
		// Best effort: the encoded copies should not linger in freed memory.
		clear(der)
		clear(data)
		if err != nil {
			return nil, fmt.Errorf("ca: write key: %w", err)
		}
		if won {
			return key, nil
		}
	}
	return nil, fmt.Errorf("ca: load key %s: it keeps appearing and disappearing", keyPath)
}

// loadOrCreateCert returns the certificate at certPath, self-signing one
// with key if missing; as with the key, a lost race means reading the winner's.
func loadOrCreateCert(dir, certPath string, key *ecdsa.PrivateKey) (*x509.Certificate, []byte, error) {
	for range 3 {
		cert, data, err := readCert(certPath)
		if err == nil {
			return cert, data, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		der, err := newCACert(key, time.Now())
		if err != nil {
			return nil, nil, err
		}
		data = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		won, err := publish(dir, certPath, data, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("ca: write certificate: %w", err)
		}
		if won {
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				return nil, nil, fmt.Errorf("ca: parse new certificate: %w", err)
			}
			return cert, data, nil
		}
	}
	return nil, nil, fmt.Errorf("ca: load certificate %s: it keeps appearing and disappearing", certPath)
}

func newCACert(key *ecdsa.PrivateKey, now time.Time) ([]byte, error) {
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	// A random suffix keeps every install's CA subject distinct: NSS-based
	// trust stores get confused by two CAs with one subject but different keys.
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, fmt.Errorf("ca: random name: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   "airlock local CA " + hex.EncodeToString(suffix[:]),
			Organization: []string{"airlock"},
		},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		BasicConstraintsValid: true,
		IsCA:                  true,
		// Path length 0: a leaked leaf key can do no more than its leaf, and
		// nothing signed by this CA can itself act as a CA.
		MaxPathLen:     0,
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("ca: sign certificate: %w", err)
	}
	return der, nil
}

// readKey reads and checks the key file. Mode and owner are taken from the
// open descriptor, so they describe the very file whose bytes are parsed.
func readKey(path string) (*ecdsa.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("ca: open key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("ca: stat key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("ca: key %s is not a regular file", path)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("ca: key %s has mode %04o: it must not be accessible to group or others (chmod 600 it, and consider the CA compromised)", path, fi.Mode().Perm())
	}
	if err := checkOwner(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxPEMSize+1))
	if err != nil {
		return nil, fmt.Errorf("ca: read key: %w", err)
	}
	defer clear(data)
	if len(data) > maxPEMSize {
		return nil, fmt.Errorf("ca: key %s is larger than %d bytes", path, maxPEMSize)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("ca: key %s holds no PEM block (remove %s and %s to create a new CA)", path, path, certName)
	}
	defer clear(block.Bytes)
	var parsed any
	switch block.Type {
	case "PRIVATE KEY":
		parsed, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		parsed, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("ca: key %s holds a %q PEM block, want PRIVATE KEY", path, block.Type)
	}
	if err != nil {
		// The parser's error never quotes key bytes, so it is safe to wrap.
		return nil, fmt.Errorf("ca: parse key %s: %w", path, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("ca: key %s is a %T, want ECDSA", path, parsed)
	}
	return key, nil
}

func readCert(path string) (*x509.Certificate, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("ca: open certificate: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEMSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("ca: read certificate: %w", err)
	}
	if len(data) > maxPEMSize {
		return nil, nil, fmt.Errorf("ca: certificate %s is larger than %d bytes", path, maxPEMSize)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("ca: certificate %s holds no CERTIFICATE PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: parse certificate %s: %w", path, err)
	}
	// Re-encode so CertPEM is exactly one clean block, whatever else the
	// file carried around it.
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), nil
}

// checkPair makes sure cert is a usable CA for key: a mismatched pair would
// mint leaves that no sandbox trusts, and fail only later and obscurely.
func checkPair(cert *x509.Certificate, key *ecdsa.PrivateKey, certPath, keyPath string, now time.Time) error {
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return fmt.Errorf("ca: certificate %s does not match key %s (remove both to create a new CA)", certPath, keyPath)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("ca: certificate %s is not a CA certificate", certPath)
	}
	if err := cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature); err != nil {
		return fmt.Errorf("ca: certificate %s is not self-signed by its key: %w", certPath, err)
	}
	if now.After(cert.NotAfter) {
		return fmt.Errorf("ca: certificate %s expired on %s (remove it and %s to create a new CA)", certPath, cert.NotAfter.Format(time.DateOnly), keyPath)
	}
	return nil
}

// publish writes data to a temp file in dir and hard-links it to final.
// Unlike rename, link fails when final exists, so of several racing
// publishers exactly one wins (won) and the others must use its file;
// readers never see a partial file because the link is made only after the
// content is complete and synced.
func publish(dir, final string, data []byte, mode fs.FileMode) (won bool, err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+filepath.Base(final)+"-*") // created 0600
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	// Chmod, unlike the create mode, is not narrowed by the umask.
	if mode != 0o600 {
		if err := f.Chmod(mode); err != nil {
			f.Close()
			return false, err
		}
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, err
	}
	// The CA is long-lived: a power loss must not leave an empty key that
	// every later Load refuses.
	if err := f.Sync(); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	if err := os.Link(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	syncDir(dir)
	return true, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // best effort: some filesystems refuse fsync on dirs
		_ = d.Close()
	}
}

// removeStaleTemps deletes temp files a crashed Load left behind, since one
// of them may hold a copy of the key.
func removeStaleTemps(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, tmpPrefix+certName+"-") && !strings.HasPrefix(name, tmpPrefix+keyName+"-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleTmpAge {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
}

func randSerial() (*big.Int, error) {
	// 128 random bits, positive, as RFC 5280 and CA/B rules expect.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("ca: random serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

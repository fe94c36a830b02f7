package ca

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestCA(tb testing.TB) *CA {
	tb.Helper()
	c, err := Load(filepath.Join(tb.TempDir(), "airlock"))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func fingerprint(c *CA) string {
	sum := sha256.Sum256(c.Certificate().Raw)
	return hex.EncodeToString(sum[:])
}

func TestDir(t *testing.T) {
	t.Setenv("AIRLOCK_CONFIG_DIR", "/some/where")
	if d, err := Dir(); err != nil || d != "/some/where" {
		t.Fatalf("Dir() = %q, %v; want /some/where", d, err)
	}
	t.Setenv("AIRLOCK_CONFIG_DIR", "")
	cfg, err := os.UserConfigDir()
	if err != nil {
		t.Skipf("no user config dir here: %v", err)
	}
	if d, err := Dir(); err != nil || d != filepath.Join(cfg, "airlock") {
		t.Fatalf("Dir() = %q, %v; want %q", d, err, filepath.Join(cfg, "airlock"))
	}
}

func TestLoadCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cfg", "airlock")
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		for path, want := range map[string]os.FileMode{
			dir:                          0o700 | os.ModeDir,
			filepath.Join(dir, keyName):  0o600,
			filepath.Join(dir, certName): 0o644,
		} {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != want {
				t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
			}
		}
	}
	if c.Path() != filepath.Join(dir, certName) {
		t.Errorf("Path() = %q", c.Path())
	}
	onDisk, err := os.ReadFile(c.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, c.CertPEM()) {
		t.Error("CertPEM() differs from ca.pem")
	}

	cert := c.Certificate()
	if !strings.HasPrefix(cert.Subject.CommonName, "airlock local CA ") || len(cert.Subject.CommonName) <= len("airlock local CA ") {
		t.Errorf("CN = %q", cert.Subject.CommonName)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		t.Errorf("basic constraints: IsCA=%v valid=%v MaxPathLen=%d zero=%v", cert.IsCA, cert.BasicConstraintsValid, cert.MaxPathLen, cert.MaxPathLenZero)
	}
	if cert.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("KeyUsage = %v", cert.KeyUsage)
	}
	if len(cert.PermittedDNSDomains)+len(cert.ExcludedDNSDomains)+len(cert.PermittedIPRanges)+len(cert.ExcludedIPRanges) != 0 || cert.PermittedDNSDomainsCritical {
		t.Error("CA carries name constraints")
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", cert.PublicKey)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life < 10*365*24*time.Hour || life > 10*366*24*time.Hour {
		t.Errorf("validity %v, want ~10 years", life)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	// The CA must be usable as a trust anchor by itself.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CertPEM()) {
		t.Fatal("CertPEM does not parse into a pool")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("CA does not verify against itself: %v", err)
	}
}

func TestLoadSecondTimeSameCA(t *testing.T) {
	dir := t.TempDir()
	a, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fingerprint(a) != fingerprint(b) || !a.key.Equal(b.key) {
		t.Fatal("second Load returned a different CA")
	}
}

func TestLoadConcurrentGoroutines(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "airlock")
	const n = 20
	fps := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			c, err := Load(dir)
			if err != nil {
				errs[i] = err
				return
			}
			fps[i] = fingerprint(c)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Load %d: %v", i, errs[i])
		}
		if fps[i] != fps[0] {
			t.Fatalf("Load %d got CA %s, Load 0 got %s", i, fps[i], fps[0])
		}
	}
	assertOnlyCAFiles(t, dir)
	final, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fingerprint(final) != fps[0] {
		t.Fatal("the CA on disk is not the one the racers got")
	}
}

func assertOnlyCAFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != keyName || names[1] != certName {
		t.Fatalf("dir holds %v, want only %s and %s", names, certName, keyName)
	}
}

const (
	helperDirEnv   = "AIRLOCK_CA_TEST_HELPER_DIR"
	helperStartEnv = "AIRLOCK_CA_TEST_HELPER_START"
)

// TestLoadConcurrentProcesses re-executes the test binary 4 times, each
// process racing 5 Loads, all released at the same instant.
func TestLoadConcurrentProcesses(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot re-exec: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "airlock")
	start := time.Now().Add(500 * time.Millisecond)
	const procs = 4
	outs := make([]*bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd := exec.Command(exe, "-test.run=^TestHelperLoadProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperStartEnv+"="+strconv.FormatInt(start.UnixNano(), 10))
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	var fps []string
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
		sc := bufio.NewScanner(outs[i])
		found := 0
		for sc.Scan() {
			if fp, ok := strings.CutPrefix(sc.Text(), "CA-FINGERPRINT="); ok {
				fps = append(fps, fp)
				found++
			}
		}
		if found == 0 {
			t.Fatalf("helper %d printed no fingerprint:\n%s", i, outs[i])
		}
	}
	final, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, fp := range fps {
		if fp != fingerprint(final) {
			t.Fatalf("load %d got CA %s, disk has %s", i, fp, fingerprint(final))
		}
	}
	if len(fps) != procs*5 {
		t.Fatalf("got %d fingerprints, want %d", len(fps), procs*5)
	}
	assertOnlyCAFiles(t, dir)
}

// TestHelperLoadProcess is the child side of TestLoadConcurrentProcesses.
func TestHelperLoadProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("helper process for TestLoadConcurrentProcesses")
	}
	startNs, err := strconv.ParseInt(os.Getenv(helperStartEnv), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, startNs)))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 5 {
		wg.Go(func() {
			c, err := Load(dir)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			fmt.Printf("CA-FINGERPRINT=%s\n", fingerprint(c))
		})
	}
	wg.Wait()
}

func TestLoadRefusesAccessibleKey(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix modes")
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		dir := t.TempDir()
		if _, err := Load(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(dir, keyName), mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), "group or others") {
			t.Errorf("mode %04o: Load error = %v, want a refusal", mode, err)
		}
	}
	// Owner-only modes other than 0600 are fine.
	dir := t.TempDir()
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, keyName), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
}

func TestLoadRefusesForeignOwnedKey(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown the key to someone else")
	}
	dir := t.TempDir()
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dir, keyName), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("Load error = %v, want owner refusal", err)
	}
}

func TestLoadRefusesMismatchedPair(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if _, err := Load(a); err != nil {
		t.Fatal(err)
	}
	other, err := Load(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, certName), other.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(a)
	if err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Load error = %v, want mismatch refusal", err)
	}
}

func TestLoadBrokenFiles(t *testing.T) {
	t.Run("cert without key", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := Load(dir); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, keyName))
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "exists without") {
			t.Fatalf("Load error = %v", err)
		}
	})
	t.Run("garbage key", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, keyName), []byte("not a key"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil {
			t.Fatal("Load accepted a garbage key")
		}
	})
	t.Run("non-CA certificate", func(t *testing.T) {
		dir := t.TempDir()
		c, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		// A leaf for the CA's own key, not marked as a CA.
		tmpl := &x509.Certificate{SerialNumber: c.cert.SerialNumber, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, c.key.Public(), c.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.Path(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not a CA") {
			t.Fatalf("Load error = %v", err)
		}
	})
	t.Run("key without cert is completed", func(t *testing.T) {
		// What a crash between publishing the key and the certificate leaves.
		dir := t.TempDir()
		c, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(c.Path())
		d, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !d.key.Equal(c.key) {
			t.Fatal("key was replaced")
		}
	})
	t.Run("stale temp removed", func(t *testing.T) {
		dir := t.TempDir()
		stale := filepath.Join(dir, tmpPrefix+keyName+"-123")
		fresh := filepath.Join(dir, tmpPrefix+keyName+"-456")
		for _, p := range []string{stale, fresh} {
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		old := time.Now().Add(-time.Hour)
		os.Chtimes(stale, old, old)
		if _, err := Load(dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(stale); !os.IsNotExist(err) {
			t.Error("stale temp file survived")
		}
		if _, err := os.Stat(fresh); err != nil {
			t.Error("a possibly in-use temp file was removed")
		}
	})
}

func TestBundle(t *testing.T) {
	c := newTestCA(t)
	other := newTestCA(t)
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys.pem")
	// No trailing newline, to check the CA still starts on its own line.
	if err := os.WriteFile(sys, bytes.TrimSpace(other.CertPEM()), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	saved := systemBundles
	t.Cleanup(func() { systemBundles = saved })

	systemBundles = []string{filepath.Join(dir, "missing.pem"), empty, dir, sys}
	got, err := c.Bundle()
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(bytes.TrimSpace(other.CertPEM()), '\n'), c.CertPEM()...)
	if !bytes.Equal(got, want) {
		t.Fatalf("Bundle() =\n%s\nwant\n%s", got, want)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(got) {
		t.Fatal("bundle does not parse")
	}
	for _, cc := range []*CA{c, other} {
		if _, err := cc.Certificate().Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("bundle lacks a root: %v", err)
		}
	}

	systemBundles = []string{filepath.Join(dir, "missing.pem")}
	got, err = c.Bundle()
	if err != nil || !bytes.Equal(got, c.CertPEM()) {
		t.Fatalf("without system roots: Bundle() = %q, %v; want the CA alone", got, err)
	}
}

func TestBundleFileIsOneReadOnlyFilePerContent(t *testing.T) {
	c := newTestCA(t)
	other := newTestCA(t)
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys.pem")
	if err := os.WriteFile(sys, other.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := systemBundles
	t.Cleanup(func() { systemBundles = saved })
	systemBundles = []string{sys}
	bundles := filepath.Join(dir, "bundles")

	p1, err := c.BundleFile(bundles)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.BundleFile(bundles)
	if err != nil || p2 != p1 {
		t.Fatalf("second BundleFile = %q, %v; want the same file %q", p2, err, p1)
	}
	want, _ := c.Bundle()
	got, err := os.ReadFile(p1)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the file does not hold the bundle: %v", err)
	}
	if fi, err := os.Stat(p1); err != nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("bundle mode: %v, %v; want 0444", fi.Mode(), err)
	}
	if fi, err := os.Stat(bundles); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("bundle dir mode: %v, %v; want 0700", fi.Mode(), err)
	}

	// Another CA, or other system roots: another file.
	p3, err := other.BundleFile(bundles)
	if err != nil || p3 == p1 {
		t.Fatalf("another CA's bundle = %q, %v; want a file of its own", p3, err)
	}

	// A damaged file under the name, or a link planted there, is replaced
	// (the link itself, not what it points to).
	if err := os.Chmod(p1, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p1, want[:len(want)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := c.BundleFile(bundles); err != nil || p != p1 {
		t.Fatalf("BundleFile over a damaged file = %q, %v", p, err)
	}
	if got, _ := os.ReadFile(p1); !bytes.Equal(got, want) {
		t.Fatal("a damaged bundle was used as it was")
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Remove(p1)
	if err := os.Symlink(victim, p1); err != nil {
		t.Fatal(err)
	}
	if p, err := c.BundleFile(bundles); err != nil || p != p1 {
		t.Fatalf("BundleFile over a link = %q, %v", p, err)
	}
	if fi, err := os.Lstat(p1); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the link is still there: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Fatalf("BundleFile wrote through a link: %q", b)
	}

	// Writing a new bundle removes old ones nobody used for an hour, and
	// leaves the recent ones.
	old := time.Now().Add(-2 * staleBundle)
	if err := os.Chtimes(p3, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sys, append(other.CertPEM(), c.CertPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	p4, err := c.BundleFile(bundles)
	if err != nil || p4 == p1 {
		t.Fatalf("new system roots: BundleFile = %q, %v; want a new file", p4, err)
	}
	if _, err := os.Stat(p3); !os.IsNotExist(err) {
		t.Errorf("a stale bundle was kept: %v", err)
	}
	if _, err := os.Stat(p1); err != nil {
		t.Errorf("a bundle used just now was removed: %v", err)
	}
}

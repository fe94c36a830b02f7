package ca

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"software.sslmate.com/src/go-pkcs12"
)

func TestTrustStoreHoldsTheSystemRootsAndTheCAAndIsMadeOnce(t *testing.T) {
	c := newTestCA(t)
	other := newTestCA(t)
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys.pem")
	// A key block and garbage between certificates are skipped, not fatal.
	junk := "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\nnot pem\n"
	if err := os.WriteFile(sys, append([]byte(junk), other.CertPEM()...), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := systemBundles
	t.Cleanup(func() { systemBundles = saved })
	systemBundles = []string{sys}
	bundle, err := c.BundleFile(filepath.Join(dir, "bundles"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := TrustStoreFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != filepath.Dir(bundle) || !strings.HasSuffix(p, ".p12") {
		t.Errorf("TrustStoreFile(%s) = %s, want a .p12 beside the bundle", bundle, p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pkcs12.DecodeTrustStore(data, TrustStorePassword)
	if err != nil {
		t.Fatalf("DecodeTrustStore: %v", err)
	}
	var subjects []string
	for _, cert := range certs {
		subjects = append(subjects, cert.Subject.String())
	}
	if len(certs) != 2 || !certs[0].Equal(other.Certificate()) || !certs[1].Equal(c.Certificate()) {
		t.Fatalf("trust store holds %q, want the system root then airlock's CA", subjects)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o444 {
		t.Errorf("trust store mode %v, want 0444", st.Mode().Perm())
	}
	again, err := TrustStoreFile(bundle)
	if err != nil || again != p {
		t.Fatalf("second TrustStoreFile = %q, %v; want %q", again, err, p)
	}
	if got, _ := os.ReadFile(p); string(got) != string(data) {
		t.Error("the second call rewrote the trust store; it should reuse it")
	}
}

func TestATrustStoreThatCannotBeMadeSaysWhereAndWhatToDo(t *testing.T) {
	c := newTestCA(t)
	dir := t.TempDir()
	saved := systemBundles
	t.Cleanup(func() { systemBundles = saved })
	systemBundles = nil
	bundle, err := c.BundleFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A directory where the store goes (a file would be reused: it is
	// trusted by name, in a directory only airlock writes).
	target := filepath.Join(dir, trustStoreOf(filepath.Base(bundle)))
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = TrustStoreFile(bundle)
	if err == nil || !strings.Contains(err.Error(), "ca: java trust store: write "+target) || !strings.Contains(err.Error(), "AIRLOCK_STATE_DIR") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("TrustStoreFile over a directory: %v; want one line naming %s and what to do", err, target)
	}
	left, _ := filepath.Glob(filepath.Join(dir, tmpPrefix+"*"))
	if len(left) != 0 {
		t.Errorf("left behind %v", left)
	}
	if _, err := TrustStoreFile(filepath.Join(dir, "other.pem")); err == nil {
		t.Error("TrustStoreFile of a file BundleFile did not write: no error")
	}
}

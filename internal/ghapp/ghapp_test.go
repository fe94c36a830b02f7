package ghapp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/ghapp/ghapptest"
)

var testKey = func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}()

// fake serves the stand-in token endpoint over TLS from a test CA; the
// client trusts that CA only, as the host's client trusts --upstream-ca.
func fake(t *testing.T, repos ...string) (*ghapptest.Server, *Minter) {
	t.Helper()
	srv := &ghapptest.Server{AppID: "4242", InstallationID: "77", Key: &testKey.PublicKey, Repos: repos}
	ca, err := ghapptest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	m := &Minter{App: App{AppID: "4242", InstallationID: "77", Repositories: []string{"org/demo"}, API: ts.URL,
		Permissions: map[string]string{"contents": "write"}}, Key: testKey, Client: client}
	return srv, m
}

func TestTheJWTIsRS256SignedByTheKeyWithGitHubsTimes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	jwt, err := JWT(testKey, "4242", now)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("JWT = %q, want three parts", jwt)
	}
	hb, _ := base64.RawURLEncoding.DecodeString(parts[0])
	cb, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var head map[string]string
	var claims struct {
		Iat, Exp int64
		Iss      string
	}
	if json.Unmarshal(hb, &head) != nil || json.Unmarshal(cb, &claims) != nil {
		t.Fatalf("JWT parts are not JSON: %s %s", hb, cb)
	}
	if head["alg"] != "RS256" {
		t.Errorf("alg = %q, want RS256", head["alg"])
	}
	if claims.Iss != "4242" || claims.Iat != now.Unix()-60 || claims.Exp > now.Unix()+600 || claims.Exp <= now.Unix() {
		t.Errorf("claims = %+v, want iss 4242, iat now-60, exp within 10 minutes", claims)
	}
	// The fake endpoint verifies the signature independently (crypto/rsa
	// over header.payload): a good JWT is accepted, one from another key not.
	srv, m := fake(t, "demo")
	if _, err := m.Mint(context.Background(), time.Now()); err != nil {
		t.Fatalf("Mint with the App's key: %v", err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	m.Key = other
	_, err = m.Mint(context.Background(), time.Now())
	if err == nil || !strings.Contains(err.Error(), "answered 401") {
		t.Fatalf("Mint with another key: err = %v, want the endpoint's 401", err)
	}
	if srv.Minted() != 1 {
		t.Errorf("minted %d tokens, want 1", srv.Minted())
	}
}

func TestMintAsksForTheNamedRepositoriesOnly(t *testing.T) {
	srv, m := fake(t, "demo", "other")
	tok, err := m.Mint(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok.Value, "ghs_") || time.Until(tok.Expires) > MaxLifetime+time.Minute {
		t.Errorf("token = %v, want a ghs_ token living at most an hour", tok)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", tok, tok, tok, tok); strings.Contains(s, tok.Value) {
		t.Errorf("printing a Token shows its value: %s", s)
	}
	// The server enforces the scope the token was minted with.
	backend := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	git := srv.Git(backend)
	for path, want := range map[string]int{"/org/demo.git/info/refs": 200, "/org/other.git/info/refs": 403} {
		r := httptest.NewRequest("GET", path, nil)
		r.SetBasicAuth("x-access-token", tok.Value)
		w := httptest.NewRecorder()
		git.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("GET %s with the token = %d, want %d", path, w.Code, want)
		}
	}
	m.App.Repositories = []string{"notthere"}
	if _, err := m.Mint(context.Background(), time.Now()); err == nil || !strings.Contains(err.Error(), "422") {
		t.Errorf("a repository the installation cannot reach: err = %v, want 422", err)
	}
}

func TestParseKeyTakesRSAInPKCS1OrPKCS8AndNothingElse(t *testing.T) {
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(testKey)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec8, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecSEC, _ := x509.MarshalECPrivateKey(ec)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")})
	for name, c := range map[string]struct {
		pem  []byte
		want string // "" = accepted
	}{
		"a PKCS#1 RSA key is accepted":       {ghapptest.KeyPEM(testKey), ""},
		"a PKCS#8 RSA key is accepted":       {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), ""},
		"a PKCS#8 EC key is refused":         {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ec8}), "not RSA"},
		"an EC PRIVATE KEY block is refused": {pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecSEC}), "not an RSA private key"},
		"a certificate is refused":           {cert, "not an RSA private key"},
		"a public key is refused":            {pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("x")}), "not an RSA private key"},
		"text that is not PEM is refused":    {[]byte("ghp_notakeyatall"), "not a PEM file"},
		"an encrypted key is refused":        {pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("x")}), "encrypted"},
		"a damaged RSA block is refused":     {pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte("garbage")}), "not a valid"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseKey(c.pem)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("ParseKey = %v, want %q", err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "ghp_") {
				t.Errorf("the error quotes the file: %v", err)
			}
		})
	}
	dir := t.TempDir()
	if _, err := LoadKey(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("LoadKey(a directory) = %v, want not a regular file", err)
	}
	big := filepath.Join(dir, "big.pem")
	os.WriteFile(big, make([]byte, maxKeyFile+10), 0o600)
	if _, err := LoadKey(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("LoadKey(a huge file) = %v, want larger than", err)
	}
}

func TestAppCheckNamesWhatIsWrong(t *testing.T) {
	good := App{AppID: "1", InstallationID: "2", KeyFile: "/k.pem", Repositories: []string{"org/repo"}, Permissions: map[string]string{"contents": "write"}}
	if err := good.Check(); err != nil {
		t.Fatalf("good app: %v", err)
	}
	for name, c := range map[string]struct {
		edit func(*App)
		want string
	}{
		"no app id":            {func(a *App) { a.AppID = "" }, "app:"},
		"a non-numeric id":     {func(a *App) { a.InstallationID = "x1" }, "installation:"},
		"no key":               {func(a *App) { a.KeyFile = "" }, "key:"},
		"no repositories":      {func(a *App) { a.Repositories = nil }, "repos:"},
		"a path as a repo":     {func(a *App) { a.Repositories = []string{"../x"} }, "repos:"},
		"an unknown access":    {func(a *App) { a.Permissions = map[string]string{"contents": "all"} }, "permissions:"},
		"an http api":          {func(a *App) { a.API = "http://api.github.com" }, "api:"},
		"an api with userinfo": {func(a *App) { a.API = "https://u:p@api.github.com" }, "api:"},
	} {
		t.Run(name, func(t *testing.T) {
			a := good
			c.edit(&a)
			if err := a.Check(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check = %v, want %q", err, c.want)
			}
		})
	}
}

func TestNextRefreshesTenMinutesEarlyAndNeverSpins(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for name, c := range map[string]struct {
		exp, want time.Time
	}{
		"an hour's token is replaced at 50 minutes":      {now.Add(time.Hour), now.Add(50 * time.Minute)},
		"a token claiming a day is treated as an hour's": {now.Add(24 * time.Hour), now.Add(50 * time.Minute)},
		"a 4-minute token is replaced halfway":           {now.Add(4 * time.Minute), now.Add(2 * time.Minute)},
		"an expired token is retried after a pause":      {now.Add(-time.Minute), now.Add(retryEvery)},
	} {
		if got := Next(now, c.exp); !got.Equal(c.want) {
			t.Errorf("%s: Next = %v, want %v", name, got.Sub(now), c.want.Sub(now))
		}
	}
}

// fakeClock moves only when the Keeper waits: each wait advances it by the
// duration asked, so hours of refreshes run at once.
type fakeClock struct {
	t   time.Time
	eps []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.t }
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.t = c.t.Add(d)
	c.eps = append(c.eps, d)
	ch := make(chan time.Time, 1)
	ch <- c.t
	return ch
}

// mintFunc is a Minter in a function: tokens an hour long from the clock's now.
type mintFunc func(ctx context.Context, now time.Time) (Token, error)

func (f mintFunc) Mint(ctx context.Context, now time.Time) (Token, error) { return f(ctx, now) }

func TestTheKeeperRotatesBeforeEachTokenLapsesAndRetriesFailures(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	n := 0
	mint := mintFunc(func(_ context.Context, now time.Time) (Token, error) {
		n++
		if n == 2 {
			return Token{}, fmt.Errorf("token endpoint answered 503")
		}
		return Token{Value: fmt.Sprintf("ghs_token%d", n), Expires: now.Add(time.Hour)}, nil
	})
	first, _ := mint(context.Background(), clock.Now())
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	var errs []error
	k := &Keeper{Minter: mint, Now: clock.Now, After: clock.After,
		Rotate: func(v []byte) error {
			got = append(got, string(v))
			if len(got) == 2 {
				cancel()
			}
			return nil
		},
		OnError: func(err error) { errs = append(errs, err) }}
	k.Run(ctx, first)
	if len(got) != 2 || len(errs) != 1 {
		t.Fatalf("rotations %q, refresh errors %v; want 2 and 1", got, errs)
	}
	if got[0] != "ghs_token3" || got[1] != "ghs_token4" {
		t.Errorf("rotated to %q, want the tokens minted after the failure", got)
	}
	want := []time.Duration{50 * time.Minute, retryEvery, 50 * time.Minute}
	if fmt.Sprint(clock.eps) != fmt.Sprint(want) {
		t.Errorf("waits = %v, want %v (50m per token, a retry after the failure)", clock.eps, want)
	}
}

func TestTheKeeperStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() {
		(&Keeper{Minter: mintFunc(func(context.Context, time.Time) (Token, error) {
			t.Error("minted after the context ended")
			return Token{}, nil
		}), Rotate: func([]byte) error { return nil }}).Run(ctx, Token{Value: "ghs_x", Expires: time.Now().Add(time.Hour)})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// Command upstream is the demo's stand-in for a public API: an HTTPS server
// on loopback with its own throwaway CA. It echoes what it received, so the
// demo can show what left the sandbox after airlock's gateway.
//
//	upstream -addr 127.0.0.1:443 -name api.demo.test -ca-out /tmp/demo-ca.pem
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:443", "listen address")
	name := flag.String("name", "api.demo.test", "the server's DNS name")
	caOut := flag.String("ca-out", "demo-ca.pem", "where to write the CA certificate clients must trust")
	quiet := flag.Bool("quiet", false, "answer \"ok\" and log nothing (benchmarks)")
	flag.Parse()
	cert, caPEM, err := issue(*name)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*caOut, caPEM, 0o644); err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{
		Addr:      *addr,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok { // for bench/gateway.sh
				serveBytes(w, n)
				return
			}
			if *quiet {
				io.WriteString(w, "ok\n")
				return
			}
			// The host-side log shows what really left the sandbox; the echo
			// shows what the sandbox gets back (airlock redacts real values).
			fmt.Printf("received %s %s  Authorization: %s\n", r.Method, r.URL.Path, r.Header.Get("Authorization"))
			fmt.Fprintf(w, "api.demo.test says: you sent Authorization: %s\n", r.Header.Get("Authorization"))
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	log.Fatal(srv.ListenAndServeTLS("", ""))
}

// serveBytes streams n bytes (a size like 1048576) from one reused buffer.
func serveBytes(w http.ResponseWriter, n string) {
	size, err := strconv.ParseInt(n, 10, 64)
	if err != nil || size < 0 {
		http.Error(w, "bad size", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Length", n)
	buf := make([]byte, 256<<10)
	for size > 0 {
		chunk := buf[:min(int64(len(buf)), size)]
		if _, err := w.Write(chunk); err != nil {
			return
		}
		size -= int64(len(chunk))
	}
}

// issue makes a throwaway CA and a leaf for name signed by it.
func issue(name string) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "demo upstream CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

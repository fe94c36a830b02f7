// netclient is a Go net/http client the network tests run inside the
// sandbox: it takes the system roots (SSL_CERT_FILE) and, where set, the
// proxy variables, as any Go program does.
//
//	netclient get URL        print the body
//	netclient h2 URL         GET offering HTTP/2 only (as gRPC does), print protocol-status
//	netclient sse URL        print when the first event arrived and when the stream ended
//	netclient ws URL         WebSocket: send a text frame, print the echo
//	                         ($WS_TOKEN, if set, goes in an Authorization header)
//	netclient download URL   read the body, print its size
package main

import (
	"bufio"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fail(fmt.Errorf("usage: netclient get|h2|sse|ws|download URL"))
	}
	url := os.Args[2]
	switch os.Args[1] {
	case "get":
		resp := do(http.DefaultClient, mustReq("GET", url))
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, b)
	case "h2":
		var only http.Protocols
		only.SetHTTP2(true)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Protocols = &only
		resp := do(&http.Client{Transport: tr}, mustReq("GET", url))
		io.Copy(io.Discard, resp.Body)
		fmt.Printf("%s-%d\n", resp.Proto, resp.StatusCode)
	case "sse":
		start := time.Now()
		resp := do(http.DefaultClient, mustReq("GET", url))
		sc := bufio.NewScanner(resp.Body)
		first := time.Duration(0)
		events := 0
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") {
				events++
				if first == 0 {
					first = time.Since(start)
				}
			}
		}
		fmt.Printf("events %d first %dms end %dms\n", events, first.Milliseconds(), time.Since(start).Milliseconds())
	case "ws":
		// HTTP/1.1 only: an upgrade is not a thing in HTTP/2.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ForceAttemptHTTP2 = false
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		req := mustReq("GET", url)
		key := make([]byte, 16)
		rand.Read(key)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key))
		req.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
		if tok := os.Getenv("WS_TOKEN"); tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp := do(&http.Client{Transport: tr}, req)
		if resp.StatusCode != http.StatusSwitchingProtocols {
			fail(fmt.Errorf("upgrade: %s", resp.Status))
		}
		rw := resp.Body.(io.ReadWriteCloser)
		msg := []byte("hello over websocket")
		mask := []byte{1, 2, 3, 4}
		frame := append([]byte{0x81, 0x80 | byte(len(msg))}, mask...)
		for i, c := range msg {
			frame = append(frame, c^mask[i%4])
		}
		if _, err := rw.Write(frame); err != nil {
			fail(err)
		}
		head := make([]byte, 2)
		if _, err := io.ReadFull(rw, head); err != nil {
			fail(err)
		}
		body := make([]byte, head[1]&0x7f)
		if _, err := io.ReadFull(rw, body); err != nil {
			fail(err)
		}
		fmt.Printf("echo %s\n", body)
	case "download":
		resp := do(http.DefaultClient, mustReq("GET", url))
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			fail(err)
		}
		fmt.Printf("downloaded %d\n", n)
	default:
		fail(fmt.Errorf("unknown mode %q", os.Args[1]))
	}
}

func mustReq(method, url string) *http.Request {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		fail(err)
	}
	return req
}

func do(c *http.Client, req *http.Request) *http.Response {
	resp, err := c.Do(req)
	if err != nil {
		fail(err)
	}
	return resp
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "netclient:", err)
	os.Exit(1)
}

// Package testhttp holds what tests need to speak HTTP below net/http's
// client (a request whose body stops part-way), and the round trip every
// test repeats.
package testhttp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Listen returns a TCP listener on a free loopback port, closed when t
// ends (closing it sooner is fine).
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Serve accepts connections on a free loopback port until t ends, runs
// handle on each in a goroutine of its own, then closes it; it returns the
// address. An app below net/http's server: one that hangs up at once, or
// answers bytes that are not HTTP.
func Serve(t testing.TB, handle func(conn net.Conn)) string {
	t.Helper()
	ln := Listen(t)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				handle(conn)
			}()
		}
	}()
	return ln.Addr().String()
}

// PartialPost opens a connection to addr and sends a POST of path with
// header and a Content-Length of length, then body (shorter than length, or
// empty), and nothing more: a sender that stalls. The connection closes
// when t ends; reads and writes on it give up after a minute, a ceiling
// only a hang reaches.
func PartialPost(t testing.TB, addr, path string, header http.Header, length int, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var req strings.Builder
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: ferry.test\r\nContent-Length: %d\r\n", path, length)
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	req.WriteString("\r\n" + body)
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// ReadResponse reads the answer on conn: its status, header and body.
func ReadResponse(t testing.TB, conn net.Conn) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

// Do sends req on http.DefaultClient and reads the whole answer: its status
// and body. A request that gets no answer fails t.
func Do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL, err)
	}
	return res.StatusCode, string(body)
}

// Get is Do of a GET of url.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Do(t, req)
}

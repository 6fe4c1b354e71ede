// Package leaktest checks, in a package's TestMain, that its tests leave no
// goroutine behind.
package leaktest

import (
	"fmt"
	"net/http"
	"os"

	"go.uber.org/goleak"
)

// Run runs m's tests and returns the exit code for os.Exit: the tests' own,
// or 1 when they passed but left goroutines running. The idle keep-alive
// connections of http.DefaultTransport, which the tests' requests and the
// forwarder's default client share, are closed first: they are not leaks.
func Run(m interface{ Run() int }) int {
	code := m.Run()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

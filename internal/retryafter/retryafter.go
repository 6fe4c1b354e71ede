// Package retryafter reads the Retry-After header (RFC 9110, section
// 10.2.3) for the forwarder and the catch-up clients alike.
package retryafter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Parse returns the wait v asks for, in delay-seconds or as an HTTP date,
// at most limit: a longer wait, however long (no number of seconds
// overflows), is limit. Absent, unreadable or past, it is 0.
func Parse(v string, now time.Time, limit time.Duration) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || secs > uint64(limit/time.Second) {
			return limit
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now) // saturates: never wraps
	}
	return min(max(d, 0), limit)
}

package retryafter

import (
	"net/http"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const limit = 24 * time.Hour
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"-5", 0},
		{"soon", 0},
		{"1.5", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{now.Add(2 * time.Hour).Format(time.RFC850), 2 * time.Hour},
		{now.Add(30 * 24 * time.Hour).Format(http.TimeFormat), limit},
		{"86401", limit},
		// Seconds whose Duration would overflow int64 nanoseconds: 2^63 ns
		// is 9223372036.9 s, 2^64 ns 18446744073.7 s.
		{"9223372037", limit},
		{"18446744074", limit},
		{"99999999999999999999999", limit},
	} {
		if got := Parse(tc.header, now, limit); got != tc.want {
			t.Errorf("Parse(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}

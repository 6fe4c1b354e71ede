package ferry_test

import (
	"testing"

	"github.com/ferry-inbox/ferry"
)

// TestIdempotencyKeyGolden pins the key format: downstream systems store
// these keys to recognise a repeated attempt, so a change of format (prefix,
// hash, separator, length) would make every in-flight event look new to
// them. These values must never change.
func TestIdempotencyKeyGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ source, eventID, want string }{
		{"stripe", "evt_1", "ferry_a614a71e404480d5e8d3f202d01788f3"},
		{"github", "3f8a1c2e-0b1d-11ef-9c2a-5e6f7a8b9c0d", "ferry_367e91042a73328e9ad853b3d976ed41"},
		{"shop", "évt/ü 1", "ferry_374bca926505186e189a8250baca42b9"},
	} {
		if got := ferry.IdempotencyKey(tc.source, tc.eventID); got != tc.want {
			t.Errorf("IdempotencyKey(%q, %q) = %s, want %s", tc.source, tc.eventID, got, tc.want)
		}
	}
}

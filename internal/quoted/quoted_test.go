package quoted_test

import (
	"testing"

	"github.com/ferry-inbox/ferry/internal/quoted"
)

func TestHide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		msg, want string
		hid       bool
	}{
		{`bad value "s3cret"`, `bad value X`, true},
		{`"a\"b" and "c\\" then "d"`, `X and X then X`, true},
		{`empty "" too`, `empty X too`, true},
		{`nothing quoted`, `nothing quoted`, false},
		{`an unclosed "quote`, `an unclosed "quote`, false},
		{`"X"`, `X`, true},
	} {
		got, hid := quoted.Hide(tc.msg, "X")
		if got != tc.want || hid != tc.hid {
			t.Errorf("Hide(%q) = %q, %v; want %q, %v", tc.msg, got, hid, tc.want, tc.hid)
		}
	}
}

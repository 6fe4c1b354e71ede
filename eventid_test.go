package ferry_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
)

func TestValidateEventID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string
		ok   bool
	}{
		{"Stripe", "evt_1NG8Du2eZvKYlo2CUI79vXWy", true},
		{"GitHubGUID", "72d3162e-cc78-11e3-81ab-4c9367dc0958", true},
		{"Unicode", "événement-東京-✓", true},
		{"MaxBytes", strings.Repeat("a", ferry.MaxEventIDBytes), true},
		{"MaxBytesMultibyte", strings.Repeat("é", ferry.MaxEventIDBytes/2), true},
		{"Empty", "", false},
		{"OneByteTooLong", strings.Repeat("a", ferry.MaxEventIDBytes+1), false},
		{"3000Bytes", strings.Repeat("a", 3000), false},
		{"9000Bytes", strings.Repeat("a", 9000), false},
		{"NUL", "evt_\x00", false},
		{"Newline", "evt_1\nlevel=ERROR", false},
		{"Escape", "evt_\x1b[31m", false},
		{"DEL", "evt_\x7f", false},
		{"C1", "evt_\u0085", false},
		{"RightToLeftOverride", "evt_\u202egpj.exe", false},
		{"RightToLeftIsolate", "evt_\u2067abc\u2069", false},
		{"LeftToRightMark", "evt_\u200e1", false},
		{"ArabicLetterMark", "evt_\u061c1", false},
		{"ZeroWidthJoiner", "evt_\u200d", true},
		{"InvalidUTF8", "evt_\xff\xfe", false},
		{"TruncatedRune", "evt_\xc3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ferry.ValidateEventID(tc.id)
			if tc.ok {
				if err != nil {
					t.Fatalf("ValidateEventID: %v", err)
				}
				return
			}
			if !errors.Is(err, ferry.ErrBadEventID) || !errors.Is(err, ferry.ErrInvalidParams) {
				t.Fatalf("ValidateEventID error = %v, want ErrBadEventID and ErrInvalidParams", err)
			}
			if tc.id != "" && strings.Contains(err.Error(), tc.id) {
				t.Fatalf("error %q quotes the id", err)
			}
		})
	}
}

func TestValidateEventType(t *testing.T) {
	t.Parallel()
	for _, typ := range []string{"", "push", "orders/create", "invoice.payment_succeeded", strings.Repeat("t", ferry.MaxEventTypeBytes)} {
		if err := ferry.ValidateEventType(typ); err != nil {
			t.Errorf("ValidateEventType(%q): %v", typ, err)
		}
	}
	for _, typ := range []string{strings.Repeat("t", ferry.MaxEventTypeBytes+1), "push\x00", "push\r\n", "\xff", "push\u202e"} {
		err := ferry.ValidateEventType(typ)
		if !errors.Is(err, ferry.ErrBadEventType) || !errors.Is(err, ferry.ErrInvalidParams) || errors.Is(err, ferry.ErrBadEventID) {
			t.Errorf("ValidateEventType(%q) = %v, want ErrBadEventType and ErrInvalidParams only", typ, err)
		}
	}
}

// storable is the rule written out a second way, as the fuzzers' oracle:
// code point ranges instead of package unicode.
func storable(s string, max int) bool {
	if len(s) > max || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return false
		}
		if r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			return false // bidirectional controls
		}
	}
	return true
}

func FuzzValidateEventID(f *testing.F) {
	for _, seed := range []string{"evt_1", "", "a\x00b", "\xff", "é", "\u0085", "\u2028", "\u202e", "\u2066", strings.Repeat("x", 256)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ferry.ValidateEventID(id)
		want := id != "" && storable(id, ferry.MaxEventIDBytes)
		if (err == nil) != want {
			t.Fatalf("ValidateEventID(%q) = %v, want ok=%v", id, err, want)
		}
		if err != nil && (!errors.Is(err, ferry.ErrBadEventID) || !errors.Is(err, ferry.ErrInvalidParams)) {
			t.Fatalf("error %v wraps neither ErrBadEventID nor ErrInvalidParams", err)
		}
	})
}

func FuzzValidateEventType(f *testing.F) {
	for _, seed := range []string{"push", "", "a\tb", "\xc3", strings.Repeat("x", 256)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, typ string) {
		err := ferry.ValidateEventType(typ)
		if want := storable(typ, ferry.MaxEventTypeBytes); (err == nil) != want {
			t.Fatalf("ValidateEventType(%q) = %v, want ok=%v", typ, err, want)
		}
		if err != nil && !errors.Is(err, ferry.ErrBadEventType) {
			t.Fatalf("error %v does not wrap ErrBadEventType", err)
		}
	})
}

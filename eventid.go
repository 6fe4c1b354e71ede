package ferry

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxEventIDBytes is the longest event id Ferry stores. Providers' ids are
// far shorter (Stripe's "evt_..." and Svix's "msg_..." about 30 bytes,
// GitHub's and Shopify's UUIDs 36), while PostgreSQL's unique index refuses
// a key of more than about 2.7 KB that SQLite would keep: one cap, well
// below that, makes both stores agree.
const MaxEventIDBytes = 255

// MaxEventTypeBytes is the longest event type Ferry stores. Providers' types
// are short names ("invoice.payment_succeeded", "orders/create").
const MaxEventTypeBytes = 255

var (
	// ErrBadEventID is returned for an event id no store can keep the same
	// way: empty, longer than MaxEventIDBytes, not UTF-8, or holding a
	// control character or a bidirectional control. The receiver answers it
	// 400 bad_event_id.
	ErrBadEventID = errors.New("ferry: event id not storable")

	// ErrBadEventType is ErrBadEventID's rule for the event type, which may
	// be empty. The receiver answers it 400 bad_event_type.
	ErrBadEventType = errors.New("ferry: event type not storable")
)

// ValidateEventID checks that id can be stored as an event id on every
// store alike. The receiver calls it before storing, and stores call it on
// receive, so the rule has one home. The error wraps ErrBadEventID and
// ErrInvalidParams and names the rule broken, never the id.
func ValidateEventID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: %w: empty", ErrInvalidParams, ErrBadEventID)
	}
	if reason := unstorable(id, MaxEventIDBytes); reason != "" {
		return fmt.Errorf("%w: %w: %s", ErrInvalidParams, ErrBadEventID, reason)
	}
	return nil
}

// ValidateEventType is ValidateEventID for an event type, which may be
// empty (a provider that sends none). The error wraps ErrBadEventType and
// ErrInvalidParams.
func ValidateEventType(typ string) error {
	if reason := unstorable(typ, MaxEventTypeBytes); reason != "" {
		return fmt.Errorf("%w: %w: %s", ErrInvalidParams, ErrBadEventType, reason)
	}
	return nil
}

// unstorable returns why s cannot be stored as a key of at most max bytes,
// or "". Control characters (C0, DEL and C1) are refused: PostgreSQL's text
// cannot hold a NUL, and the rest would reach log lines, the CLI's table and
// the dashboard as terminal escapes and forged line breaks. Bidirectional
// controls (U+202E and its kin) are refused for the same readers: they would
// show an id in another order than it is stored and searched.
func unstorable(s string, max int) string {
	if len(s) > max {
		return fmt.Sprintf("%d bytes, more than %d", len(s), max)
	}
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "holds a control character"
		}
		if unicode.Is(unicode.Bidi_Control, r) {
			return "holds a bidirectional control character"
		}
	}
	return ""
}

package ferry

import (
	"errors"
	"net/http"
)

// Verifier checks that a delivery was signed by its provider and reads the
// event's identity from it. It is pure: raw body bytes and headers in, no I/O.
// Verifiers for Stripe, GitHub, Shopify, Standard Webhooks and generic HMAC
// senders live in package provider.
type Verifier interface {
	Verify(header http.Header, body []byte) (*Verified, error)
}

// SignatureNamer is implemented by a Verifier whose signature header is
// named by its sender's configuration (a generic HMAC sender's), which no
// rule of names can know: a receiver never stores the headers it names.
type SignatureNamer interface {
	SignatureHeaders() []string
}

// Verified is what a Verifier read from a genuine delivery.
type Verified struct {
	// EventID is the provider's event id: the deduplication key.
	EventID string
	// Type is the provider's event type; empty if it sends none.
	Type string
	// Secret is the position, in the verifier's secrets, of the one that
	// verified the delivery: 0 the first. While a secret is rotated it
	// says whether the sender still signs with the old one. A Verifier
	// with one secret leaves it 0.
	Secret int
}

// Verification errors. A Verifier returns one of these (possibly wrapped) so
// the receiver can answer with an exact status and a machine-readable reason
// and without a hint of the expected signature.
var (
	// ErrNoSignature: the signature header is absent. 401 missing_signature.
	ErrNoSignature = errors.New("ferry: signature header missing")
	// ErrMalformedSignature: the signature header cannot be parsed.
	// 401 malformed_signature.
	ErrMalformedSignature = errors.New("ferry: signature header malformed")
	// ErrBadSignature: no configured secret produces the signature.
	// 401 bad_signature.
	ErrBadSignature = errors.New("ferry: signature does not match")
	// ErrStaleTimestamp: the signed timestamp is outside the tolerance, in the
	// past or the future. 401 stale_timestamp.
	ErrStaleTimestamp = errors.New("ferry: timestamp outside tolerance")
	// ErrNoEventID: the delivery carries no event id. 400 missing_event_id.
	ErrNoEventID = errors.New("ferry: event id missing")
	// ErrBadPayload: the body cannot be parsed where the event id must come
	// from it. 400 bad_payload.
	ErrBadPayload = errors.New("ferry: payload unparseable")
)

// VerifyError is a verification failure that says what to fix. The receiver
// answers its Detail beside the error code and logs it, so a sender whose
// setup is wrong (a missing prefix, another header name) can tell why; an
// error of any other type gets the code alone. The verifiers of package
// provider return one for every failure.
type VerifyError struct {
	// Provider names the verifier in Error ("stripe"); may be empty.
	Provider string
	// Err is one of the verification errors above: ErrNoSignature and the
	// rest. errors.Is sees it.
	Err error
	// Detail is what is wrong, or empty. It is shown to whoever sent the
	// request and written to the log, so it names headers, fields, lengths
	// and configured prefixes, never a header's value, a secret, a
	// signature (received or expected) or a payload byte.
	Detail string
}

// Error is "provider: sentinel: detail", leaving out what is empty.
func (e *VerifyError) Error() string {
	msg := "ferry: verification failed"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Provider != "" {
		msg = e.Provider + ": " + msg
	}
	return msg
}

// Unwrap returns Err.
func (e *VerifyError) Unwrap() error { return e.Err }

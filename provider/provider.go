// Package provider verifies webhook signatures from Stripe, GitHub, Shopify,
// Standard Webhooks senders (Svix and others) and generic HMAC senders.
//
// Every verifier implements ferry.Verifier: it is pure (headers and raw body
// in, no I/O), compares MACs with hmac.Equal only, accepts several secrets at
// once so a secret can be rotated without dropping deliveries, and never
// panics on hostile input. Errors are *ferry.VerifyError, wrapping the
// sentinels of package ferry (ferry.ErrBadSignature and the rest), with a
// Detail the receiver shows the sender and logs: a header or field name, a
// length, the configured prefix, never a secret, a signature, a header's
// value or a payload byte.
//
// Identity errors (ferry.ErrNoEventID, ferry.ErrBadPayload, and
// ferry.ErrBadEventID or ErrBadEventType for an id or type in a JSON body
// that is not UTF-8 text as sent) are returned only
// for deliveries whose signature checked out, so a forgery is always answered
// as a signature failure, never as a bad request.
//
// All verifiers take one Options struct; build one by name with New, the way
// a service configuration does:
//
//	v, err := provider.New("stripe", provider.Options{Secrets: []string{secret}})
package provider

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
)

// DefaultTolerance is how far a signed timestamp may lie from now, in the
// past or the future, unless Options.Tolerance says otherwise. It matches
// Stripe's and the Standard Webhooks libraries' default.
const DefaultTolerance = 5 * time.Minute

var (
	// ErrInvalidOptions is returned by the constructors for options they
	// cannot build a verifier from: no secret, an empty or undecodable secret,
	// a negative tolerance, an incomplete HMAC scheme. It wraps a reason.
	ErrInvalidOptions = errors.New("provider: invalid options")

	// ErrUnknownProvider is returned by New for a name it does not know. The
	// message lists the valid names.
	ErrUnknownProvider = errors.New("provider: unknown provider")
)

// SecretError is an entry of Options.Secrets a verifier cannot use: empty,
// or not in the provider's format. It is an ErrInvalidOptions (errors.Is
// matches); Index lets a caller name the entry in its own terms.
type SecretError struct {
	Index  int    // into Options.Secrets
	Reason string // what is wrong, never the secret
}

// Error names the entry by its index and says what is wrong, never the
// secret.
func (e *SecretError) Error() string {
	return fmt.Sprintf("%v: secret %d: %s", ErrInvalidOptions, e.Index, e.Reason)
}

// Unwrap makes a SecretError an ErrInvalidOptions.
func (e *SecretError) Unwrap() error { return ErrInvalidOptions }

// Options configure every verifier. Fields a provider has no use for are
// ignored: GitHub and Shopify signatures carry no timestamp, nor do generic
// HMAC ones unless HMAC.Mode is HMACModeIDTimestampBody, so Tolerance and
// Now mean nothing to them.
type Options struct {
	// Secrets are the signing secrets; a delivery signed by any one of them is
	// genuine. List the new secret beside the old one while rotating, then
	// drop the old. Required, and none may be empty (an empty HMAC key is one
	// anyone can sign with).
	//
	// Stripe secrets are used as shown in the dashboard, "whsec_" included.
	// Standard Webhooks secrets are "whsec_" followed by base64; the key is
	// the decoded part (the prefix is optional).
	Secrets []string

	// Tolerance is how far a signed timestamp may lie from Now, in the past
	// (a replay) or the future (a skewed or forged clock). Defaults to
	// DefaultTolerance, 5 minutes.
	Tolerance time.Duration

	// Now is the clock timestamps are checked against. Defaults to time.Now.
	Now func() time.Time

	// HMAC describes the scheme of a generic HMAC sender. Only NewHMAC (and
	// New("hmac", ...)) read it.
	HMAC HMACOptions
}

// constructors maps the names New accepts to their constructors.
var constructors = map[string]func(Options) (ferry.Verifier, error){
	"github":           func(o Options) (ferry.Verifier, error) { return asVerifier(NewGitHub(o)) },
	"hmac":             func(o Options) (ferry.Verifier, error) { return asVerifier(NewHMAC(o)) },
	"shopify":          func(o Options) (ferry.Verifier, error) { return asVerifier(NewShopify(o)) },
	"standardwebhooks": func(o Options) (ferry.Verifier, error) { return asVerifier(NewStandardWebhooks(o)) },
	"stripe":           func(o Options) (ferry.Verifier, error) { return asVerifier(NewStripe(o)) },
}

// asVerifier returns a constructor's result as a ferry.Verifier, and a nil
// interface on error: a nil *Stripe returned as ferry.Verifier is a non-nil
// interface that passes every nil check and panics on first use.
func asVerifier[T ferry.Verifier](v T, err error) (ferry.Verifier, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Names returns the provider names New accepts, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(constructors))
}

// New builds the verifier of the named provider, so a configuration file can
// pick one by name. Unknown names return ErrUnknownProvider. On any error the
// Verifier is a nil interface, never a nil pointer inside one.
func New(name string, opts Options) (ferry.Verifier, error) {
	build, ok := constructors[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknownProvider, name, strings.Join(Names(), ", "))
	}
	return build(opts)
}

// config is Options resolved: keys decoded, defaults applied.
type config struct {
	keys      [][]byte
	tolerance time.Duration
	now       func() time.Time
}

// newConfig checks opts and applies defaults; decodeKey turns one secret
// into its HMAC key.
func newConfig(opts Options, decodeKey func(string) ([]byte, error)) (config, error) {
	if len(opts.Secrets) == 0 {
		return config{}, fmt.Errorf("%w: no secret", ErrInvalidOptions)
	}
	if opts.Tolerance < 0 {
		return config{}, fmt.Errorf("%w: negative tolerance", ErrInvalidOptions)
	}
	cfg := config{tolerance: opts.Tolerance, now: opts.Now}
	if cfg.tolerance == 0 {
		cfg.tolerance = DefaultTolerance
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	for i, secret := range opts.Secrets {
		key, err := decodeKey(secret)
		if err != nil {
			return config{}, &SecretError{Index: i, Reason: err.Error()}
		}
		if len(key) == 0 {
			return config{}, &SecretError{Index: i, Reason: "is empty"}
		}
		cfg.keys = append(cfg.keys, key)
	}
	return cfg, nil
}

// rawKey uses a secret's bytes as the key, as Stripe, GitHub and Shopify do.
func rawKey(secret string) ([]byte, error) { return []byte(secret), nil }

// signedBy returns the position of the first key under which the MAC of
// msg (its parts concatenated) equals any of sigs; ok is false when none
// does.
func signedBy(newHash func() hash.Hash, keys, sigs [][]byte, msg ...[]byte) (secret int, ok bool) {
	for i, key := range keys {
		sum := macOf(newHash, key, msg...)
		for _, sig := range sigs {
			if hmac.Equal(sum, sig) {
				return i, true
			}
		}
	}
	return 0, false
}

// macOf returns the HMAC of msg's parts, concatenated, under key.
func macOf(newHash func() hash.Hash, key []byte, msg ...[]byte) []byte {
	mac := hmac.New(newHash, key)
	for _, part := range msg {
		mac.Write(part)
	}
	return mac.Sum(nil)
}

// checkTimestamp refuses a signed time further than tolerance from now, in
// either direction. The reason says which direction (a clock to fix), not
// the time.
func checkTimestamp(provider string, signed, now time.Time, tolerance time.Duration) error {
	switch age := now.Sub(signed); { // saturates instead of overflowing
	case age > tolerance:
		return verifyErr(provider, ferry.ErrStaleTimestamp, "signed more than "+tolerance.String()+" ago")
	case age < -tolerance:
		return verifyErr(provider, ferry.ErrStaleTimestamp, "signed more than "+tolerance.String()+" in the future")
	}
	return nil
}

// verifyErr returns a ferry sentinel with the provider's name and a reason
// the receiver shows the sender and logs (ferry.VerifyError.Detail): header
// and field names, lengths, the configured prefix; never a header value, a
// secret, a signature or payload bytes.
func verifyErr(provider string, sentinel error, reason string) error {
	return &ferry.VerifyError{Provider: provider, Err: sentinel, Detail: reason}
}

// parseUnix reads the unix seconds of the timestamp header name, whose
// value is value. Its error names the header, not the value.
func parseUnix(name, value string) (int64, error) {
	if value == "" {
		return 0, errors.New(noHeader(name))
	}
	unix, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return 0, errors.New(name + " header is not a unix time")
	}
	return unix, nil
}

// noHeader is the reason of a missing header: its name, so a sender that
// uses another can tell.
func noHeader(name string) string { return "no " + name + " header" }

package provider

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/ferry-inbox/ferry"
)

// Encoding is how a signature header spells the MAC's bytes.
type Encoding string

const (
	EncodingHex    Encoding = "hex"    // lower or upper case
	EncodingBase64 Encoding = "base64" // standard alphabet, padded
)

// Algorithm is the hash under the HMAC.
type Algorithm string

const (
	// AlgorithmSHA256 is HMAC-SHA256. The default.
	AlgorithmSHA256 Algorithm = "sha256"
	// AlgorithmSHA1 exists for legacy senders only; it is never a default.
	AlgorithmSHA1 Algorithm = "sha1"
)

// HMACMode is what a generic HMAC sender's MAC covers.
type HMACMode string

const (
	// HMACModeBody signs the raw body alone. An id or type read from a
	// header is then unsigned: a captured delivery re-sent under a new id
	// verifies, and only a body-level defence can tell it is a replay.
	HMACModeBody HMACMode = "body"
	// HMACModeIDTimestampBody signs "<id>.<timestamp>.<body>", as Standard
	// Webhooks does: the id (from EventIDHeader) and a unix-seconds
	// timestamp (from TimestampHeader) are signed, and a timestamp further
	// than Options.Tolerance from now is refused, so a captured delivery
	// can neither take a new id nor be replayed after the tolerance. The
	// type header, if any, stays unsigned.
	HMACModeIDTimestampBody HMACMode = "id.timestamp.body"
)

// HMACOptions describe a generic sender that signs with HMAC and puts the
// MAC in one header, optionally after a prefix: "X-Signature: sha256=<hex>".
// Mode says what is signed, the raw body by default. The event id comes from
// a header or from a top-level JSON field of the body; exactly one of
// EventIDHeader and EventIDField must be set.
type HMACOptions struct {
	// Header is the signature header. Required.
	Header string
	// Prefix is text before the MAC in Header, such as "sha256="; a header
	// without it is malformed. Defaults to none.
	Prefix string
	// Encoding is how the MAC is spelled. Defaults to EncodingHex.
	Encoding Encoding
	// Algorithm is the hash. Defaults to AlgorithmSHA256.
	Algorithm Algorithm
	// Mode is what the MAC covers. Defaults to HMACModeBody. Prefer
	// HMACModeIDTimestampBody whenever the sender can sign that way.
	Mode HMACMode
	// TimestampHeader is the header holding the signing time in unix
	// seconds. Required with HMACModeIDTimestampBody, refused otherwise (a
	// timestamp nobody signs would only look checked).
	TimestampHeader string

	// EventIDHeader is the header holding the event id. Required with
	// HMACModeIDTimestampBody.
	EventIDHeader string
	// EventIDField is the top-level JSON field holding the event id, a
	// string or a number (kept as written, "12345"). The body is signed, so
	// the id is too, in either mode.
	EventIDField string

	// TypeHeader or TypeField (not both) name where the event type is; both
	// empty means the sender has no type. A body that is not JSON, or a field
	// that is missing or not a string or number, leaves the type empty.
	TypeHeader string
	TypeField  string
}

// HMAC verifies a generic HMAC sender described by Options.HMAC. In
// HMACModeBody its signatures carry no timestamp and do not cover an id
// header, so a captured delivery can be replayed, under its own id
// (deduplication stops it) or a new one (replay detection,
// ferryhttp.Source.ReplayWindow, stops it within its window); in
// HMACModeIDTimestampBody neither replay verifies past the tolerance.
type HMAC struct {
	cfg     config
	opts    HMACOptions
	newHash func() hash.Hash
}

var (
	_ ferry.Verifier       = (*HMAC)(nil)
	_ ferry.SignatureNamer = (*HMAC)(nil)
)

// NewHMAC returns a generic HMAC verifier. It reads Secrets and HMAC, and
// Tolerance and Now in HMACModeIDTimestampBody.
func NewHMAC(opts Options) (*HMAC, error) {
	cfg, err := newConfig(opts, rawKey)
	if err != nil {
		return nil, err
	}
	h := opts.HMAC
	if h.Header == "" {
		return nil, fmt.Errorf("%w: HMAC.Header is required", ErrInvalidOptions)
	}
	for _, hdr := range []struct{ field, name string }{
		{"Header", h.Header}, {"EventIDHeader", h.EventIDHeader}, {"TypeHeader", h.TypeHeader}, {"TimestampHeader", h.TimestampHeader},
	} {
		if hdr.name != "" && !httpguts.ValidHeaderFieldName(hdr.name) {
			// A sender cannot send such a header: every delivery would fail.
			return nil, fmt.Errorf("%w: HMAC.%s %q is not an HTTP header name: use letters, digits and - only, like \"X-Signature\"", ErrInvalidOptions, hdr.field, hdr.name)
		}
	}
	if (h.EventIDHeader == "") == (h.EventIDField == "") {
		return nil, fmt.Errorf("%w: set exactly one of HMAC.EventIDHeader and HMAC.EventIDField", ErrInvalidOptions)
	}
	if h.TypeHeader != "" && h.TypeField != "" {
		return nil, fmt.Errorf("%w: set at most one of HMAC.TypeHeader and HMAC.TypeField", ErrInvalidOptions)
	}
	switch h.Mode {
	case "", HMACModeBody:
		h.Mode = HMACModeBody
		if h.TimestampHeader != "" {
			return nil, fmt.Errorf("%w: HMAC.TimestampHeader is only read with HMAC.Mode %q", ErrInvalidOptions, HMACModeIDTimestampBody)
		}
	case HMACModeIDTimestampBody:
		if h.EventIDHeader == "" || h.TimestampHeader == "" {
			return nil, fmt.Errorf("%w: HMAC.Mode %q needs HMAC.EventIDHeader and HMAC.TimestampHeader", ErrInvalidOptions, h.Mode)
		}
	default:
		return nil, fmt.Errorf("%w: HMAC.Mode %q (valid: %s, %s)", ErrInvalidOptions, h.Mode, HMACModeBody, HMACModeIDTimestampBody)
	}
	switch h.Encoding {
	case "":
		h.Encoding = EncodingHex
	case EncodingHex, EncodingBase64:
	default:
		return nil, fmt.Errorf("%w: HMAC.Encoding %q (valid: hex, base64)", ErrInvalidOptions, h.Encoding)
	}
	v := &HMAC{cfg: cfg}
	switch h.Algorithm {
	case "", AlgorithmSHA256:
		h.Algorithm, v.newHash = AlgorithmSHA256, sha256.New
	case AlgorithmSHA1:
		v.newHash = sha1.New
	default:
		return nil, fmt.Errorf("%w: HMAC.Algorithm %q (valid: sha256, sha1)", ErrInvalidOptions, h.Algorithm)
	}
	v.opts = h
	return v, nil
}

// SignatureHeaders implements ferry.SignatureNamer: the header the sender
// signs in, whatever its name, which package ferryhttp's Receiver never
// stores.
func (v *HMAC) SignatureHeaders() []string { return []string{v.opts.Header} }

// Verify implements ferry.Verifier.
func (v *HMAC) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	value := header.Get(v.opts.Header)
	if value == "" {
		return nil, verifyErr("hmac", ferry.ErrNoSignature, noHeader(v.opts.Header))
	}
	mac, err := decodeSignature(value, v.opts.Prefix, v.opts.Encoding, v.newHash().Size())
	if err != nil {
		return nil, verifyErr("hmac", ferry.ErrMalformedSignature, err.Error())
	}
	if v.opts.Mode == HMACModeIDTimestampBody {
		return v.verifyIDTimestamp(header, mac, body)
	}
	secret, ok := signedBy(v.newHash, v.cfg.keys, [][]byte{mac}, body)
	if !ok {
		return nil, verifyErr("hmac", ferry.ErrBadSignature, "")
	}

	var fields map[string]json.RawMessage
	if v.opts.EventIDField != "" || v.opts.TypeField != "" {
		if err := json.Unmarshal(body, &fields); err != nil && v.opts.EventIDField != "" {
			return nil, verifyErr("hmac", ferry.ErrBadPayload, "body is not a JSON object")
		}
	}
	verified := &ferry.Verified{Secret: secret}
	if v.opts.EventIDHeader != "" {
		verified.EventID = header.Get(v.opts.EventIDHeader)
	} else {
		id, ok := scalarField(fields, v.opts.EventIDField)
		if !ok {
			return nil, verifyErr("hmac", ferry.ErrBadPayload, "event id field is neither a string nor a number")
		}
		verified.EventID = id
	}
	if verified.EventID == "" {
		return nil, verifyErr("hmac", ferry.ErrNoEventID, v.noEventID())
	}
	if v.opts.TypeHeader != "" {
		verified.Type = header.Get(v.opts.TypeHeader)
	} else if v.opts.TypeField != "" {
		verified.Type, _ = scalarField(fields, v.opts.TypeField)
	}
	if err := v.identityAsSent(body, verified); err != nil {
		return nil, err
	}
	return verified, nil
}

// verifyIDTimestamp checks a MAC over "<id>.<timestamp>.<body>", then the
// timestamp, then the id: a forgery is always a signature failure.
func (v *HMAC) verifyIDTimestamp(header http.Header, mac, body []byte) (*ferry.Verified, error) {
	timestamp := header.Get(v.opts.TimestampHeader)
	unix, err := parseUnix(v.opts.TimestampHeader, timestamp)
	if err != nil {
		return nil, verifyErr("hmac", ferry.ErrMalformedSignature, err.Error())
	}
	// An absent id is signed as empty, as Standard Webhooks does.
	id := header.Get(v.opts.EventIDHeader)
	secret, ok := signedBy(v.newHash, v.cfg.keys, [][]byte{mac}, []byte(id), []byte("."), []byte(timestamp), []byte("."), body)
	if !ok {
		return nil, verifyErr("hmac", ferry.ErrBadSignature, "")
	}
	if err := checkTimestamp("hmac", time.Unix(unix, 0), v.cfg.now(), v.cfg.tolerance); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, verifyErr("hmac", ferry.ErrNoEventID, v.noEventID())
	}
	verified := &ferry.Verified{EventID: id, Secret: secret}
	if v.opts.TypeHeader != "" {
		verified.Type = header.Get(v.opts.TypeHeader)
	} else if v.opts.TypeField != "" {
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(body, &fields) // the type is optional; a non-JSON body has none
		verified.Type, _ = scalarField(fields, v.opts.TypeField)
	}
	if err := v.identityAsSent(body, verified); err != nil {
		return nil, err
	}
	return verified, nil
}

// identityAsSent checks, by the package's identityAsSent, the fields this
// verifier reads from the body rather than from a header.
func (v *HMAC) identityAsSent(body []byte, verified *ferry.Verified) error {
	var idField, typeField string
	if v.opts.EventIDHeader == "" {
		idField = v.opts.EventIDField
	}
	if v.opts.TypeHeader == "" {
		typeField = v.opts.TypeField
	}
	return identityAsSent("hmac", body, verified, idField, typeField)
}

// noEventID is the reason of a delivery without an event id: where the id
// was looked for.
func (v *HMAC) noEventID() string {
	if v.opts.EventIDHeader != "" {
		return noHeader(v.opts.EventIDHeader)
	}
	return fmt.Sprintf("body field %q is missing, null or empty", v.opts.EventIDField)
}

// scalarField returns a JSON string field's value or a number field's
// literal. A missing or null field is ("", true): present in shape, empty
// in value. Any other type is ("", false).
func scalarField(fields map[string]json.RawMessage, name string) (string, bool) {
	raw, ok := fields[name]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return "", true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), true
	}
	return "", false
}

// decodeSignature strips prefix from a signature header value and decodes
// the MAC, which must be size bytes long. Its errors name no signature.
func decodeSignature(value, prefix string, enc Encoding, size int) ([]byte, error) {
	text, ok := strings.CutPrefix(value, prefix)
	if !ok {
		return nil, fmt.Errorf("no %q prefix", prefix)
	}
	var mac []byte
	var err error
	switch enc {
	case EncodingBase64:
		mac, err = base64.StdEncoding.DecodeString(text)
	default:
		mac, err = hex.DecodeString(text)
	}
	if err != nil {
		return nil, fmt.Errorf("not %s", enc)
	}
	if len(mac) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(mac), size)
	}
	return mac, nil
}

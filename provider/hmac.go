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
	AlgorithmSHA256 Algorithm = "sha256"
	// AlgorithmSHA1 exists for legacy senders only; it is never a default.
	AlgorithmSHA1 Algorithm = "sha1"
)

// HMACOptions describe a generic sender that signs the raw body with
// HMAC and puts the MAC in one header, optionally after a prefix:
// "X-Signature: sha256=<hex>". The event id comes from a header or from a
// top-level JSON field of the body; exactly one of EventIDHeader and
// EventIDField must be set.
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

	// EventIDHeader is the header holding the event id.
	EventIDHeader string
	// EventIDField is the top-level JSON field holding the event id, a
	// string or a number (kept as written, "12345").
	EventIDField string

	// TypeHeader or TypeField (not both) name where the event type is; both
	// empty means the sender has no type. A body that is not JSON, or a field
	// that is missing or not a string or number, leaves the type empty.
	TypeHeader string
	TypeField  string
}

// HMAC verifies a generic HMAC sender described by Options.HMAC. Its
// signatures carry no timestamp, so a captured delivery can be replayed;
// deduplication on the event id is what makes a replay harmless.
type HMAC struct {
	keys    [][]byte
	opts    HMACOptions
	newHash func() hash.Hash
}

var _ ferry.Verifier = (*HMAC)(nil)

// NewHMAC returns a generic HMAC verifier. It reads Secrets and HMAC.
func NewHMAC(opts Options) (*HMAC, error) {
	cfg, err := newConfig(opts, rawKey)
	if err != nil {
		return nil, err
	}
	h := opts.HMAC
	if h.Header == "" {
		return nil, fmt.Errorf("%w: HMAC.Header is required", ErrInvalidOptions)
	}
	if (h.EventIDHeader == "") == (h.EventIDField == "") {
		return nil, fmt.Errorf("%w: set exactly one of HMAC.EventIDHeader and HMAC.EventIDField", ErrInvalidOptions)
	}
	if h.TypeHeader != "" && h.TypeField != "" {
		return nil, fmt.Errorf("%w: set at most one of HMAC.TypeHeader and HMAC.TypeField", ErrInvalidOptions)
	}
	switch h.Encoding {
	case "":
		h.Encoding = EncodingHex
	case EncodingHex, EncodingBase64:
	default:
		return nil, fmt.Errorf("%w: HMAC.Encoding %q (valid: hex, base64)", ErrInvalidOptions, h.Encoding)
	}
	v := &HMAC{keys: cfg.keys}
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

// Verify implements ferry.Verifier.
func (v *HMAC) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	value := header.Get(v.opts.Header)
	if value == "" {
		return nil, verifyErr("hmac", ferry.ErrNoSignature, "")
	}
	mac, err := decodeSignature(value, v.opts.Prefix, v.opts.Encoding, v.newHash().Size())
	if err != nil {
		return nil, verifyErr("hmac", ferry.ErrMalformedSignature, err.Error())
	}
	if !signedByAny(v.newHash, v.keys, [][]byte{mac}, body) {
		return nil, verifyErr("hmac", ferry.ErrBadSignature, "")
	}

	var fields map[string]json.RawMessage
	if v.opts.EventIDField != "" || v.opts.TypeField != "" {
		if err := json.Unmarshal(body, &fields); err != nil && v.opts.EventIDField != "" {
			return nil, verifyErr("hmac", ferry.ErrBadPayload, "body is not a JSON object")
		}
	}
	verified := &ferry.Verified{}
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
		return nil, verifyErr("hmac", ferry.ErrNoEventID, "")
	}
	if v.opts.TypeHeader != "" {
		verified.Type = header.Get(v.opts.TypeHeader)
	} else if v.opts.TypeField != "" {
		verified.Type, _ = scalarField(fields, v.opts.TypeField)
	}
	return verified, nil
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

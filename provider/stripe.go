package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
)

// StripeSignatureHeader carries Stripe's signature:
// "t=<unix seconds>,v1=<hex>[,v1=<hex>...]".
const StripeSignatureHeader = "Stripe-Signature"

// Stripe verifies Stripe webhooks: HMAC-SHA256 in hex over
// "<t>.<body>", keyed with the endpoint's signing secret ("whsec_..." as
// shown, prefix included). Schemes other than v1 (Stripe's test-mode v0) are
// ignored; so is an unreadable v1, as in Stripe's libraries, unless no v1 is
// readable. The event id and type are the body's "id" and "type" fields.
type Stripe struct {
	cfg config
}

var _ ferry.Verifier = (*Stripe)(nil)

// NewStripe returns a Stripe verifier. It reads Secrets, Tolerance and Now.
func NewStripe(opts Options) (*Stripe, error) {
	cfg, err := newConfig(opts, rawKey)
	if err != nil {
		return nil, err
	}
	return &Stripe{cfg: cfg}, nil
}

// Verify implements ferry.Verifier.
func (s *Stripe) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	value := header.Get(StripeSignatureHeader)
	if value == "" {
		return nil, verifyErr("stripe", ferry.ErrNoSignature, noHeader(StripeSignatureHeader))
	}
	sig, err := parseStripeHeader(value)
	if err != nil {
		return nil, err
	}
	secret, ok := signedBy(sha256.New, s.cfg.keys, sig.v1, []byte(sig.timestamp), []byte("."), body)
	if !ok {
		return nil, verifyErr("stripe", ferry.ErrBadSignature, "")
	}
	if err := checkTimestamp("stripe", sig.signedAt, s.cfg.now(), s.cfg.tolerance); err != nil {
		return nil, err
	}

	var event struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &event); err != nil {
		return nil, verifyErr("stripe", ferry.ErrBadPayload, "body is not a JSON event")
	}
	if event.ID == "" {
		return nil, verifyErr("stripe", ferry.ErrNoEventID, `body has no "id" field`)
	}
	verified := &ferry.Verified{EventID: event.ID, Type: event.Type, Secret: secret}
	if err := identityAsSent("stripe", body, verified, "id", "type"); err != nil {
		return nil, err
	}
	return verified, nil
}

// stripeSignature is a parsed Stripe-Signature header.
type stripeSignature struct {
	timestamp string // as sent: it is signed byte for byte
	signedAt  time.Time
	v1        [][]byte
}

// parseStripeHeader reads "t=...,v1=...". It needs exactly one t and at
// least one v1 that is a hex SHA-256. A v1 that is not is skipped, as
// Stripe's libraries skip it, so one unreadable signature does not hide a
// valid one beside it. Unknown keys and empty items are skipped.
func parseStripeHeader(value string) (stripeSignature, error) {
	var sig stripeSignature
	unreadable := false // a v1 was skipped
	for item := range strings.SplitSeq(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		if !ok {
			return sig, verifyErr("stripe", ferry.ErrMalformedSignature, "item without '='")
		}
		switch key {
		case "t":
			if sig.timestamp != "" {
				return sig, verifyErr("stripe", ferry.ErrMalformedSignature, "more than one t")
			}
			unix, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return sig, verifyErr("stripe", ferry.ErrMalformedSignature, "t is not a unix time")
			}
			sig.timestamp, sig.signedAt = val, time.Unix(unix, 0)
		case "v1":
			mac, err := hex.DecodeString(val)
			if err != nil || len(mac) != sha256.Size {
				unreadable = true
				continue
			}
			sig.v1 = append(sig.v1, mac)
		}
	}
	if len(sig.v1) == 0 && unreadable {
		return sig, verifyErr("stripe", ferry.ErrMalformedSignature, "v1 is not a hex SHA-256")
	}
	if sig.timestamp == "" {
		return sig, verifyErr("stripe", ferry.ErrMalformedSignature, "no t")
	}
	if len(sig.v1) == 0 {
		return sig, verifyErr("stripe", ferry.ErrMalformedSignature, "no v1 signature")
	}
	return sig, nil
}

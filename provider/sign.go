package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Message is one outgoing delivery for a Signer.
type Message struct {
	// ID is the event id, sent in the provider's id header where it has one
	// (Stripe's id, and a generic HMAC sender's EventIDField, are in the
	// body, which the caller writes).
	ID string
	// Type is the event type, sent in the provider's type header where it
	// has one.
	Type string
	// Body is the payload, signed byte for byte.
	Body []byte
}

// Signer signs outgoing deliveries the way a provider's sender does: what
// it signs verifies under the matching verifier with the same Options.
// Ferry sends with it (the forwarder, `ferry send`); tests have package
// ferrytest, written independently, to check both sides against.
type Signer interface {
	// Sign sets on header the signature of m and the identity headers the
	// provider sends with it: id, type and timestamp, as the provider has
	// them.
	Sign(header http.Header, m *Message)
}

var (
	_ Signer = (*StandardWebhooksSigner)(nil)
	_ Signer = stripeSigner{}
	_ Signer = githubSigner{}
	_ Signer = shopifySigner{}
	_ Signer = hmacSigner{}
)

// NewSigner returns the signer of the named provider, the counterpart of
// New: it signs with the first of opts.Secrets, at opts.Now (defaults to
// time.Now), and reads opts.HMAC for "hmac". On any error the Signer is a
// nil interface.
func NewSigner(name string, opts Options) (Signer, error) {
	switch name {
	case "standardwebhooks":
		s, err := NewStandardWebhooksSigner(opts) // every secret checked, as for the others
		if err != nil {
			return nil, err
		}
		s.keys = s.keys[:1]
		return s, nil
	case "stripe":
		cfg, err := newConfig(opts, rawKey)
		if err != nil {
			return nil, err
		}
		return stripeSigner{key: cfg.keys[0], now: cfg.now}, nil
	case "github":
		cfg, err := newConfig(opts, rawKey)
		if err != nil {
			return nil, err
		}
		return githubSigner{key: cfg.keys[0]}, nil
	case "shopify":
		cfg, err := newConfig(opts, rawKey)
		if err != nil {
			return nil, err
		}
		return shopifySigner{key: cfg.keys[0]}, nil
	case "hmac":
		v, err := NewHMAC(opts)
		if err != nil {
			return nil, err
		}
		return hmacSigner{v: v}, nil
	}
	return nil, fmt.Errorf("%w %q (valid: %s)", ErrUnknownProvider, name, strings.Join(Names(), ", "))
}

// StandardWebhooksSigner signs as a Standard Webhooks sender: HMAC-SHA256
// in base64 over "<id>.<timestamp>.<body>", in the Webhook-Id,
// Webhook-Timestamp and Webhook-Signature headers. The forwarder signs what
// it sends the app with it.
type StandardWebhooksSigner struct {
	keys [][]byte
	now  func() time.Time
}

// NewStandardWebhooksSigner returns a Standard Webhooks signer. It reads
// Secrets ("whsec_<base64>", or the base64 alone), at least one, and Now.
// It signs with each secret: the spec's signature header holds several,
// and a receiver accepts any that verifies, so a secret is rolled by
// listing the new one beside the old until the receiver has switched.
func NewStandardWebhooksSigner(opts Options) (*StandardWebhooksSigner, error) {
	cfg, err := newConfig(opts, DecodeStandardWebhooksSecret)
	if err != nil {
		return nil, err
	}
	return &StandardWebhooksSigner{keys: cfg.keys, now: cfg.now}, nil
}

// Sign implements Signer. The type is not sent: Standard Webhooks carries
// it in the body.
func (s *StandardWebhooksSigner) Sign(header http.Header, m *Message) {
	ts := strconv.FormatInt(s.now().Unix(), 10)
	sigs := make([]string, len(s.keys))
	for i, key := range s.keys {
		mac := macOf(sha256.New, key, []byte(m.ID), []byte("."), []byte(ts), []byte("."), m.Body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac)
	}
	header.Set(StandardWebhooksIDHeader, m.ID)
	header.Set(StandardWebhooksTimestampHeader, ts)
	header.Set(StandardWebhooksSignatureHeader, strings.Join(sigs, " "))
}

type stripeSigner struct {
	key []byte
	now func() time.Time
}

// Sign sets Stripe-Signature; the id and type are the body's.
func (s stripeSigner) Sign(header http.Header, m *Message) {
	ts := strconv.FormatInt(s.now().Unix(), 10)
	mac := macOf(sha256.New, s.key, []byte(ts), []byte("."), m.Body)
	header.Set(StripeSignatureHeader, "t="+ts+",v1="+hex.EncodeToString(mac))
}

type githubSigner struct{ key []byte }

func (s githubSigner) Sign(header http.Header, m *Message) {
	header.Set(GitHubSignatureHeader, "sha256="+hex.EncodeToString(macOf(sha256.New, s.key, m.Body)))
	header.Set(GitHubDeliveryHeader, m.ID)
	setIfAny(header, GitHubEventHeader, m.Type)
}

type shopifySigner struct{ key []byte }

func (s shopifySigner) Sign(header http.Header, m *Message) {
	header.Set(ShopifySignatureHeader, base64.StdEncoding.EncodeToString(macOf(sha256.New, s.key, m.Body)))
	header.Set(ShopifyWebhookIDHeader, m.ID)
	setIfAny(header, ShopifyTopicHeader, m.Type)
}

// hmacSigner signs for the scheme a generic HMAC verifier checks, built by
// NewHMAC so both read the options the same way.
type hmacSigner struct{ v *HMAC }

func (s hmacSigner) Sign(header http.Header, m *Message) {
	o := s.v.opts
	msg := [][]byte{m.Body}
	if o.Mode == HMACModeIDTimestampBody {
		ts := strconv.FormatInt(s.v.cfg.now().Unix(), 10)
		msg = [][]byte{[]byte(m.ID), []byte("."), []byte(ts), []byte("."), m.Body}
		header.Set(o.TimestampHeader, ts)
	}
	mac := macOf(s.v.newHash, s.v.cfg.keys[0], msg...)
	text := hex.EncodeToString(mac)
	if o.Encoding == EncodingBase64 {
		text = base64.StdEncoding.EncodeToString(mac)
	}
	header.Set(o.Header, o.Prefix+text)
	if o.EventIDHeader != "" {
		header.Set(o.EventIDHeader, m.ID)
	}
	if o.TypeHeader != "" {
		setIfAny(header, o.TypeHeader, m.Type)
	}
}

func setIfAny(header http.Header, name, value string) {
	if value != "" {
		header.Set(name, value)
	}
}

package provider

import (
	"crypto/sha256"
	"net/http"

	"github.com/ferry-inbox/ferry"
)

// Shopify's delivery headers.
const (
	// ShopifySignatureHeader carries the base64 HMAC-SHA256 of the body.
	ShopifySignatureHeader = "X-Shopify-Hmac-Sha256"
	// ShopifyWebhookIDHeader carries the webhook's id, the event id: Shopify
	// keeps it on retries and advises deduplicating on it.
	ShopifyWebhookIDHeader = "X-Shopify-Webhook-Id"
	// ShopifyTopicHeader carries the event type ("orders/create").
	ShopifyTopicHeader = "X-Shopify-Topic"
)

// Shopify verifies Shopify webhooks, keyed with the app's client secret.
// Its signatures carry no timestamp. X-Shopify-Event-Id, which names the
// underlying event across subscriptions, is not the dedupe key; the receiver
// can keep it as a stored header.
type Shopify struct {
	keys [][]byte
}

var _ ferry.Verifier = (*Shopify)(nil)

// NewShopify returns a Shopify verifier. It reads Secrets only.
func NewShopify(opts Options) (*Shopify, error) {
	cfg, err := newConfig(opts, rawKey)
	if err != nil {
		return nil, err
	}
	return &Shopify{keys: cfg.keys}, nil
}

// Verify implements ferry.Verifier.
func (s *Shopify) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	value := header.Get(ShopifySignatureHeader)
	if value == "" {
		return nil, verifyErr("shopify", ferry.ErrNoSignature, "")
	}
	mac, err := decodeSignature(value, "", EncodingBase64, sha256.Size)
	if err != nil {
		return nil, verifyErr("shopify", ferry.ErrMalformedSignature, err.Error())
	}
	if !signedByAny(sha256.New, s.keys, [][]byte{mac}, body) {
		return nil, verifyErr("shopify", ferry.ErrBadSignature, "")
	}
	id := header.Get(ShopifyWebhookIDHeader)
	if id == "" {
		return nil, verifyErr("shopify", ferry.ErrNoEventID, "no "+ShopifyWebhookIDHeader)
	}
	return &ferry.Verified{EventID: id, Type: header.Get(ShopifyTopicHeader)}, nil
}

package provider

import (
	"net/http"

	"github.com/ferry-inbox/ferry"
)

// Shopify's delivery headers.
const (
	// ShopifySignatureHeader carries the base64 HMAC-SHA256 of the body.
	ShopifySignatureHeader = "X-Shopify-Hmac-Sha256"
	// ShopifyWebhookIDHeader carries the webhook's id, the event id: Shopify
	// keeps it on retries and advises deduplicating on it. It is not signed.
	ShopifyWebhookIDHeader = "X-Shopify-Webhook-Id"
	// ShopifyTopicHeader carries the event type ("orders/create"). It is not
	// signed.
	ShopifyTopicHeader = "X-Shopify-Topic"
)

// Shopify verifies Shopify webhooks, keyed with the app's client secret.
// Shopify signs the body only, with no timestamp: as with GitHub, a body
// can be re-sent under a new id and topic, which replay detection
// (ferryhttp.Source.ReplayWindow) stops within its window, and the topic
// read as Verified.Type is the sender's claim. X-Shopify-Event-Id, which
// names the underlying event across subscriptions, is not the dedupe key;
// the receiver can keep it as a stored header.
type Shopify struct {
	v bodyHMAC
}

var _ ferry.Verifier = (*Shopify)(nil)

// NewShopify returns a Shopify verifier. It reads Secrets only.
func NewShopify(opts Options) (*Shopify, error) {
	cfg, err := newConfig(opts, rawKey)
	if err != nil {
		return nil, err
	}
	return &Shopify{v: bodyHMAC{
		name: "shopify", keys: cfg.keys,
		signatureHeader: ShopifySignatureHeader, encoding: EncodingBase64,
		idHeader: ShopifyWebhookIDHeader, typeHeader: ShopifyTopicHeader,
	}}, nil
}

// Verify implements ferry.Verifier.
func (s *Shopify) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	return s.v.verify(header, body)
}

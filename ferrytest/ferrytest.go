// Package ferrytest signs webhook payloads the way each provider does, so
// users can test their Ferry receivers and handlers without the provider.
//
// Its signers are written independently of package provider's verifiers
// and signers, so a test that signs here and verifies there checks both
// against the provider's scheme. Ferry itself (the forwarder, `ferry send`)
// signs with provider.Signer, never with this package.
package ferrytest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry/provider"
)

// SignStripe signs body as Stripe does at time t and returns the headers of
// the delivery. secret is the endpoint secret as Stripe shows it, "whsec_"
// included.
func SignStripe(secret string, body []byte, t time.Time) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := sum(sha256.New, []byte(secret), []byte(ts+"."), body)
	h := jsonHeader()
	h.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac))
	return h
}

// SignGitHub signs body as GitHub does and returns the headers of the
// delivery, with its delivery id and event type ("push").
func SignGitHub(secret, deliveryID, eventType string, body []byte) http.Header {
	mac := sum(sha256.New, []byte(secret), body)
	h := jsonHeader()
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac))
	h.Set("X-GitHub-Delivery", deliveryID)
	h.Set("X-GitHub-Event", eventType)
	return h
}

// SignShopify signs body as Shopify does and returns the headers of the
// delivery, with its webhook id and topic ("orders/create").
func SignShopify(secret, webhookID, topic string, body []byte) http.Header {
	mac := sum(sha256.New, []byte(secret), body)
	h := jsonHeader()
	h.Set("X-Shopify-Hmac-Sha256", base64.StdEncoding.EncodeToString(mac))
	h.Set("X-Shopify-Webhook-Id", webhookID)
	h.Set("X-Shopify-Topic", topic)
	return h
}

// SignStandardWebhooks signs body as a Standard Webhooks sender does at time
// t, with message id id, and returns the headers of the delivery. secret is
// "whsec_<base64>" or the base64 alone; it errors if that is not base64.
func SignStandardWebhooks(secret, id string, t time.Time, body []byte) (http.Header, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("ferrytest: standard webhooks secret is not whsec_ followed by base64")
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := sum(sha256.New, key, []byte(id+"."+ts+"."), body)
	h := jsonHeader()
	h.Set("Webhook-Id", id)
	h.Set("Webhook-Timestamp", ts)
	h.Set("Webhook-Signature", "v1,"+base64.StdEncoding.EncodeToString(mac))
	return h, nil
}

// SignHMAC signs body for the generic HMAC scheme that provider.NewHMAC
// verifies, with the same defaults (hex, SHA-256, the body alone), and
// returns the headers with the signature set. Set the event id header
// yourself when the scheme reads one. It errors on an unknown encoding or
// algorithm, no Header, or a scheme that signs more than the body (use
// SignHMACEvent).
func SignHMAC(secret string, scheme provider.HMACOptions, body []byte) (http.Header, error) {
	if scheme.Mode != "" && scheme.Mode != provider.HMACModeBody {
		return nil, fmt.Errorf("ferrytest: HMAC mode %q signs an id and a timestamp: use SignHMACEvent", scheme.Mode)
	}
	return signHMAC(secret, scheme, body)
}

// SignHMACEvent signs a delivery of event id for the generic HMAC scheme,
// in either mode, at time t, and returns its headers: the signature, the
// id in EventIDHeader when the scheme has one, and the timestamp in
// TimestampHeader in provider.HMACModeIDTimestampBody. The type header is
// yours to set.
func SignHMACEvent(secret string, scheme provider.HMACOptions, id string, t time.Time, body []byte) (http.Header, error) {
	var h http.Header
	var err error
	switch scheme.Mode {
	case "", provider.HMACModeBody:
		h, err = signHMAC(secret, scheme, body)
	case provider.HMACModeIDTimestampBody:
		if scheme.TimestampHeader == "" {
			return nil, fmt.Errorf("ferrytest: HMAC mode %q needs a TimestampHeader", scheme.Mode)
		}
		ts := strconv.FormatInt(t.Unix(), 10)
		h, err = signHMAC(secret, scheme, []byte(id+"."+ts+"."), body)
		if err == nil {
			h.Set(scheme.TimestampHeader, ts)
		}
	default:
		return nil, fmt.Errorf("ferrytest: unknown HMAC mode %q", scheme.Mode)
	}
	if err != nil {
		return nil, err
	}
	if scheme.EventIDHeader != "" {
		h.Set(scheme.EventIDHeader, id)
	}
	return h, nil
}

// signHMAC MACs the parts of msg, concatenated, as scheme says.
func signHMAC(secret string, scheme provider.HMACOptions, msg ...[]byte) (http.Header, error) {
	if scheme.Header == "" {
		return nil, fmt.Errorf("ferrytest: HMAC scheme has no Header")
	}
	var newHash func() hash.Hash
	switch scheme.Algorithm {
	case "", provider.AlgorithmSHA256:
		newHash = sha256.New
	case provider.AlgorithmSHA1:
		newHash = sha1.New
	default:
		return nil, fmt.Errorf("ferrytest: unknown HMAC algorithm %q", scheme.Algorithm)
	}
	mac := sum(newHash, []byte(secret), msg...)
	var text string
	switch scheme.Encoding {
	case "", provider.EncodingHex:
		text = hex.EncodeToString(mac)
	case provider.EncodingBase64:
		text = base64.StdEncoding.EncodeToString(mac)
	default:
		return nil, fmt.Errorf("ferrytest: unknown HMAC encoding %q", scheme.Encoding)
	}
	h := jsonHeader()
	h.Set(scheme.Header, scheme.Prefix+text)
	return h, nil
}

// NewRequest returns an incoming POST request to target with header and
// body, ready for a handler's ServeHTTP. Like httptest.NewRequest it panics
// on a target it cannot parse. To call a live server, use http.NewRequest
// with the same header instead.
func NewRequest(target string, header http.Header, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	for name, values := range header {
		r.Header[name] = append([]string(nil), values...)
	}
	return r
}

func sum(newHash func() hash.Hash, key []byte, msg ...[]byte) []byte {
	mac := hmac.New(newHash, key)
	for _, part := range msg {
		mac.Write(part)
	}
	return mac.Sum(nil)
}

func jsonHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return h
}

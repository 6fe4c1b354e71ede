package provider

import (
	"crypto/sha256"
	"net/http"

	"github.com/ferry-inbox/ferry"
)

// GitHub's delivery headers.
const (
	// GitHubSignatureHeader carries "sha256=<hex>", the HMAC-SHA256 of the
	// body. The legacy SHA-1 header X-Hub-Signature is not read.
	GitHubSignatureHeader = "X-Hub-Signature-256"
	// GitHubDeliveryHeader carries the delivery's GUID, the event id. GitHub
	// keeps it on redelivery.
	GitHubDeliveryHeader = "X-GitHub-Delivery"
	// GitHubEventHeader carries the event type ("push", "pull_request").
	GitHubEventHeader = "X-GitHub-Event"
)

// GitHub verifies GitHub webhooks. Its signatures carry no timestamp, so a
// captured delivery can be replayed; deduplication on the delivery id is
// what makes a replay harmless.
type GitHub struct {
	keys [][]byte
}

var _ ferry.Verifier = (*GitHub)(nil)

// NewGitHub returns a GitHub verifier. It reads Secrets only.
func NewGitHub(opts Options) (*GitHub, error) {
	cfg, err := newConfig(opts, rawKey)
	if err != nil {
		return nil, err
	}
	return &GitHub{keys: cfg.keys}, nil
}

// Verify implements ferry.Verifier.
func (g *GitHub) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	value := header.Get(GitHubSignatureHeader)
	if value == "" {
		return nil, verifyErr("github", ferry.ErrNoSignature, "")
	}
	mac, err := decodeSignature(value, "sha256=", EncodingHex, sha256.Size)
	if err != nil {
		return nil, verifyErr("github", ferry.ErrMalformedSignature, err.Error())
	}
	if !signedByAny(sha256.New, g.keys, [][]byte{mac}, body) {
		return nil, verifyErr("github", ferry.ErrBadSignature, "")
	}
	id := header.Get(GitHubDeliveryHeader)
	if id == "" {
		return nil, verifyErr("github", ferry.ErrNoEventID, "no "+GitHubDeliveryHeader)
	}
	return &ferry.Verified{EventID: id, Type: header.Get(GitHubEventHeader)}, nil
}

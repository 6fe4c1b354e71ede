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
	// keeps it on redelivery. It is not signed.
	GitHubDeliveryHeader = "X-GitHub-Delivery"
	// GitHubEventHeader carries the event type ("push", "pull_request"). It
	// is not signed.
	GitHubEventHeader = "X-GitHub-Event"
)

// GitHub verifies GitHub webhooks. GitHub signs the body only: the delivery
// id and event type headers are not signed, and there is no timestamp. So
// whoever holds one genuine delivery can re-send it at any time, which
// deduplication on the delivery id stops while the event is kept, and
// re-send its body under a new id and any type, which deduplication does
// not stop: replay detection by body hash (ferryhttp.Source.ReplayWindow)
// does, within its window. The Verified.Type read here is the sender's
// claim; do not authorise on it.
type GitHub struct {
	v bodyHMAC
}

var _ ferry.Verifier = (*GitHub)(nil)

// NewGitHub returns a GitHub verifier. It reads Secrets only.
func NewGitHub(opts Options) (*GitHub, error) {
	cfg, err := newConfig(opts, rawKey)
	if err != nil {
		return nil, err
	}
	return &GitHub{v: bodyHMAC{
		name: "github", keys: cfg.keys,
		signatureHeader: GitHubSignatureHeader, prefix: "sha256=", encoding: EncodingHex,
		idHeader: GitHubDeliveryHeader, typeHeader: GitHubEventHeader,
	}}, nil
}

// Verify implements ferry.Verifier.
func (g *GitHub) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	return g.v.verify(header, body)
}

// bodyHMAC checks an HMAC-SHA256 of the body alone, carried in one header,
// and reads the event id and type from two others: GitHub's and Shopify's
// scheme, which differ only in names and encoding.
type bodyHMAC struct {
	name            string // in errors: "github", "shopify"
	keys            [][]byte
	signatureHeader string
	prefix          string // before the encoded MAC, e.g. "sha256="
	encoding        Encoding
	idHeader        string
	typeHeader      string
}

func (b *bodyHMAC) verify(header http.Header, body []byte) (*ferry.Verified, error) {
	value := header.Get(b.signatureHeader)
	if value == "" {
		return nil, verifyErr(b.name, ferry.ErrNoSignature, noHeader(b.signatureHeader))
	}
	mac, err := decodeSignature(value, b.prefix, b.encoding, sha256.Size)
	if err != nil {
		return nil, verifyErr(b.name, ferry.ErrMalformedSignature, err.Error())
	}
	secret, ok := signedBy(sha256.New, b.keys, [][]byte{mac}, body)
	if !ok {
		return nil, verifyErr(b.name, ferry.ErrBadSignature, "")
	}
	id := header.Get(b.idHeader)
	if id == "" {
		return nil, verifyErr(b.name, ferry.ErrNoEventID, noHeader(b.idHeader))
	}
	return &ferry.Verified{EventID: id, Type: header.Get(b.typeHeader), Secret: secret}, nil
}

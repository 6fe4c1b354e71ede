package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/ferry-inbox/ferry"
)

// The Standard Webhooks headers. Svix sends the same under "svix-" names
// (Svix-Id, Svix-Timestamp, Svix-Signature), which are read when
// Webhook-Signature is absent.
const (
	// StandardWebhooksIDHeader carries the message id, the event id; it is
	// signed and kept on retries.
	StandardWebhooksIDHeader = "Webhook-Id"
	// StandardWebhooksTimestampHeader carries the signing time in unix
	// seconds.
	StandardWebhooksTimestampHeader = "Webhook-Timestamp"
	// StandardWebhooksSignatureHeader carries a space-separated list of
	// "v1,<base64>" signatures; the delivery is genuine when any v1 entry
	// matches. Other versions and unreadable entries are skipped.
	StandardWebhooksSignatureHeader = "Webhook-Signature"
)

// StandardWebhooksSecretPrefix starts a Standard Webhooks secret; the
// base64 after it is the key.
const StandardWebhooksSecretPrefix = "whsec_"

// StandardWebhooks verifies senders that follow the Standard Webhooks
// specification: HMAC-SHA256 in base64 over "<id>.<timestamp>.<body>". The
// event type is the body's "type" field when the body is a JSON object that
// has one; it is not required.
type StandardWebhooks struct {
	cfg config
}

var _ ferry.Verifier = (*StandardWebhooks)(nil)

// NewStandardWebhooks returns a Standard Webhooks verifier. It reads
// Secrets ("whsec_<base64>", or the base64 alone), Tolerance and Now.
func NewStandardWebhooks(opts Options) (*StandardWebhooks, error) {
	cfg, err := newConfig(opts, DecodeStandardWebhooksSecret)
	if err != nil {
		return nil, err
	}
	return &StandardWebhooks{cfg: cfg}, nil
}

// DecodeStandardWebhooksSecret returns the HMAC key of a Standard Webhooks
// secret: the base64 after the optional "whsec_" prefix. An empty key is an
// error: anyone could sign with it.
func DecodeStandardWebhooksSecret(secret string) ([]byte, error) {
	text := strings.TrimPrefix(secret, StandardWebhooksSecretPrefix)
	key, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(text)
	}
	switch {
	case err != nil:
		return nil, errors.New("not whsec_ followed by base64")
	case len(key) == 0:
		return nil, errors.New("whsec_ followed by no key")
	}
	return key, nil
}

// Verify implements ferry.Verifier.
func (s *StandardWebhooks) Verify(header http.Header, body []byte) (*ferry.Verified, error) {
	names := [3]string{StandardWebhooksIDHeader, StandardWebhooksTimestampHeader, StandardWebhooksSignatureHeader}
	if header.Get(names[2]) == "" && header.Get("Svix-Signature") != "" {
		names = [3]string{"Svix-Id", "Svix-Timestamp", "Svix-Signature"}
	}
	value := header.Get(names[2])
	if value == "" {
		return nil, verifyErr("standardwebhooks", ferry.ErrNoSignature, noHeader(StandardWebhooksSignatureHeader+" or Svix-Signature"))
	}
	sigs, err := parseStandardWebhooksSignatures(value)
	if err != nil {
		return nil, err
	}
	timestamp := header.Get(names[1])
	unix, err := parseUnix(names[1], timestamp)
	if err != nil {
		return nil, verifyErr("standardwebhooks", ferry.ErrMalformedSignature, err.Error())
	}
	// An absent id is signed as empty, so a forgery without one is still
	// told apart from a genuine delivery that lacks it.
	id := header.Get(names[0])
	secret, ok := signedBy(sha256.New, s.cfg.keys, sigs, []byte(id), []byte("."), []byte(timestamp), []byte("."), body)
	if !ok {
		return nil, verifyErr("standardwebhooks", ferry.ErrBadSignature, "")
	}
	if err := checkTimestamp("standardwebhooks", time.Unix(unix, 0), s.cfg.now(), s.cfg.tolerance); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, verifyErr("standardwebhooks", ferry.ErrNoEventID, noHeader(names[0]))
	}
	var event struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &event) // the type is optional; a non-JSON body has none
	verified := &ferry.Verified{EventID: id, Type: event.Type, Secret: secret}
	if err := identityAsSent("standardwebhooks", body, verified, "", "type"); err != nil {
		return nil, err
	}
	return verified, nil
}

// parseStandardWebhooksSignatures returns the v1 MACs of a signature list,
// read as the specification's reference libraries read it: entries are
// separated by spaces, each "<version>,<signature>"; an entry that is not
// v1, or whose signature is not a base64 SHA-256, is skipped, so a sender may
// list a signature Ferry cannot read beside one it can. It fails only when
// no entry is a readable v1 signature.
func parseStandardWebhooksSignatures(value string) ([][]byte, error) {
	var sigs [][]byte
	for _, entry := range strings.Fields(value) {
		version, text, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		mac, err := base64.StdEncoding.DecodeString(text)
		if err != nil || len(mac) != sha256.Size {
			continue
		}
		sigs = append(sigs, mac)
	}
	if len(sigs) == 0 {
		return nil, verifyErr("standardwebhooks", ferry.ErrMalformedSignature, "no readable v1 signature")
	}
	return sigs, nil
}

package provider_test

import (
	"net/http"
	"testing"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

func TestShopify(t *testing.T) {
	t.Parallel()

	const secret, oldSecret = "shpss_new", "shpss_old"
	body := []byte(`{"id":820982911946154508,"email":"jon@example.com"}`)
	v, err := provider.NewShopify(provider.Options{Secrets: []string{secret, oldSecret}})
	if err != nil {
		t.Fatal(err)
	}
	signed := ferrytest.SignShopify(secret, "b54557e4", "orders/create", body)
	h := func(value string) http.Header { return with(signed, "X-Shopify-Hmac-Sha256", value) }

	runCases(t, v, []string{secret, oldSecret}, []verifyCase{
		{name: "Valid", header: signed, body: body, wantID: "b54557e4", wantType: "orders/create"},
		{name: "OldSecret", header: ferrytest.SignShopify(oldSecret, "b54557e4", "orders/create", body), body: body, wantID: "b54557e4", wantSecret: 1},
		{name: "MissingHeader", header: h(""), body: body, want: ferry.ErrNoSignature},
		{name: "NotBase64", header: h("!!!"), body: body, want: ferry.ErrMalformedSignature},
		{name: "Short", header: h("AAAA"), body: body, want: ferry.ErrMalformedSignature},
		{name: "Hex", header: h("757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"), body: body, want: ferry.ErrMalformedSignature},
		{name: "WrongSecret", header: ferrytest.SignShopify("guess", "b54557e4", "orders/create", body), body: body, want: ferry.ErrBadSignature},
		{name: "TamperedBody", header: signed, body: []byte(`{"id":1}`), want: ferry.ErrBadSignature},
		{name: "MissingWebhookID", header: with(signed, "X-Shopify-Webhook-Id", ""), body: body, want: ferry.ErrNoEventID},
	})
}

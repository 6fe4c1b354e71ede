package ferryhttp_test

import (
	"maps"
	"strings"
	"testing"
)

// TestReceiverStandardWebhooksSignatureList: through the real receiver, a
// signature list with a forged entry beside the valid one is accepted and
// stored; a list of only forged, unreadable or wrong entries is 401 and
// stores nothing.
func TestReceiverStandardWebhooksSignatureList(t *testing.T) {
	t.Parallel()
	for _, kind := range storeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind.open(t), nil)
			const body = `{"type":"user.created"}`

			d := standardWebhooks(swSecret, "msg_list_ok", body, testNow)
			valid := d.header.Get("Webhook-Signature")
			r := b.send(t, d.with("Webhook-Signature", "v1,Zm9yZ2Vk "+valid))
			if r.status != 200 || !maps.Equal(r.body, accepted) {
				t.Fatalf("forged entry beside the valid one: %d %s, want 200 accepted", r.status, r.raw)
			}
			if event(t, b.store, "standardwebhooks", "msg_list_ok") == nil {
				t.Fatal("accepted but not stored")
			}

			wrong := standardWebhooks(swSecret, "msg_list_bad", `{"other":1}`, testNow).header.Get("Webhook-Signature")
			for _, list := range []struct{ sig, reason string }{
				{"v1,Zm9yZ2Vk", "malformed_signature"},
				{"v1,Zm9yZ2Vk v1,!!! v2," + valid[3:] + " nocomma", "malformed_signature"},
				{"v1,Zm9yZ2Vk " + wrong, "bad_signature"},
			} {
				d := standardWebhooks(swSecret, "msg_list_bad", body, testNow).with("Webhook-Signature", list.sig)
				r := b.send(t, d)
				if r.status != 401 || !maps.Equal(r.body, rejected(list.reason)) {
					t.Errorf("%q: %d %s, want 401 %s", strings.ReplaceAll(list.sig, valid[3:], "<valid>"), r.status, r.raw, list.reason)
				}
			}
			if event(t, b.store, "standardwebhooks", "msg_list_bad") != nil {
				t.Fatal("a rejected delivery was stored")
			}
		})
	}
}

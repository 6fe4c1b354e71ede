package ferrytest_test

import (
	"fmt"
	"io"
	"time"

	"github.com/ferry-inbox/ferry/ferrytest"
	"github.com/ferry-inbox/ferry/provider"
)

// A test signs a Stripe event the way Stripe would and checks that the
// verifier, and so the receiver, accepts it.
func Example() {
	const secret = "whsec_test_secret"
	sentAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	body := []byte(`{"id":"evt_123","type":"invoice.paid"}`)

	req := ferrytest.NewRequest("/webhooks/stripe", ferrytest.SignStripe(secret, body, sentAt), body)

	v, err := provider.NewStripe(provider.Options{
		Secrets: []string{secret},
		Now:     func() time.Time { return sentAt.Add(time.Second) },
	})
	if err != nil {
		panic(err)
	}
	raw, _ := io.ReadAll(req.Body)
	event, err := v.Verify(req.Header, raw)
	fmt.Println(event.EventID, event.Type, err)
	// Output: evt_123 invoice.paid <nil>
}

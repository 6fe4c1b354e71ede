package ferry_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/sqlite"
)

// A Client works the events a receiver stored. Here one event is stored by
// hand (a receiver does it for real: see ferryhttp.Receiver) and handled once.
func Example() {
	dir, _ := os.MkdirTemp("", "ferry-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	store, err := sqlite.Open(filepath.Join(dir, "ferry.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	client, err := ferry.NewClient(&ferry.Config{
		Store:   store,
		Sources: []ferry.SourcePolicy{{Name: "stripe", ReplayWindow: 72 * time.Hour}},
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	client.HandleType("stripe", "invoice.paid", func(ctx context.Context, d *ferry.Delivery) error {
		// Send d.IdempotencyKey downstream: every attempt of this event
		// carries the same one.
		fmt.Printf("invoice paid: %s (attempt %d)\n", d.Event.EventID, d.Attempt)
		close(done)
		return nil
	})
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}

	if _, err := store.EventReceive(ctx, &ferry.EventReceiveParams{
		Source: "stripe", EventID: "evt_1", Type: "invoice.paid", Payload: []byte(`{"id":"evt_1"}`),
	}); err != nil {
		log.Fatal(err)
	}
	<-done
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: invoice paid: evt_1 (attempt 1)
}

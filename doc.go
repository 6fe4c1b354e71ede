// Package ferry is a crash-safe webhook inbox.
//
// Ferry verifies a provider's webhook, stores it durably before answering
// 2xx, deduplicates it on the provider's event id, and has it processed at
// least once and never silently dropped; exactly once where the work writes
// to the same database.
//
// The copied webhook dedupe writes a permanent "handled" marker and then does
// the work: a crash between the two swallows the event for good. In Ferry a
// claim is a lease, not a marker. A worker that claims an event holds it for a
// TTL measured on the database's clock and keeps it by heartbeat; if the
// worker dies, the lease lapses and another worker takes the event back. The
// attempt number is a fencing token: every write after a claim names it, so a
// worker that was paused past its lease can no longer complete, fail or
// release an event it lost.
//
// This package holds the domain (Event, State, Lease, the Store interface and
// its errors) and the Client that works a Store: Handle and HandleType
// register handlers, HandleTx one whose writes commit with the fenced done in
// the store's own transaction (the store must be the Client's Config.Store).
// It does no I/O of its own. The stores live in postgres and sqlite; the
// contract they share is storetest. See Example for a client in full.
package ferry

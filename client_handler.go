package ferry

import (
	"context"
	"fmt"
	"reflect"
)

// Handle registers h for every event of source that no HandleType handler
// takes. Register before Start.
func (c *Client) Handle(source string, h HandlerFunc) { c.register(source, "", plainHandler(h)) }

// HandleType registers h for events of source whose type is eventType.
func (c *Client) HandleType(source, eventType string, h HandlerFunc) {
	c.register(source, eventType, plainHandler(h))
}

// HandleTx registers a transactional handler for source: h's writes and the
// fenced done commit in one transaction of store. eventType "" takes every
// type.
//
// On SQLite the transaction holds the store's one write connection while h
// runs, so no heartbeat, receipt or verdict of any client on that store is
// written until it ends: keep h well within LeaseTTL. One that outlives its
// lease every time spends the source's MaxAttempts and goes dead.
//
// store must be the very value given as Config.Store: a done written through
// another store would commit in a database the client does not claim from,
// so the effect and the fence would no longer be one transaction. A wrong
// store (a different store, or a wrapper around the client's own) is not
// registered, and Start returns an error wrapping ErrInvalidParams that
// names the source.
func HandleTx[TX any](c *Client, store TxStore[TX], source, eventType string, h TxHandlerFunc[TX]) {
	if !sameStore(store, c.store) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.registerErr == nil {
			c.registerErr = fmt.Errorf("%w: HandleTx for source %q: the store (%T) is not the client's Config.Store (%T)", ErrInvalidParams, source, store, c.store)
		}
		return
	}
	c.register(source, eventType, txHandler[TX]{store: store, fn: h})
}

// sameStore reports whether a and b are the same store value. A store type
// that cannot be compared is never the same.
func sameStore(a, b Store) bool {
	ta := reflect.TypeOf(a)
	if ta == nil || ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}

func (c *Client) register(source, eventType string, h handler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		panic("ferry: handler registered after Start")
	}
	if c.handlers[source] == nil {
		c.handlers[source] = map[string]handler{}
	}
	c.handlers[source][eventType] = h
}

func (c *Client) handlerFor(ev *Event) handler {
	byType := c.handlers[ev.Source]
	if h, ok := byType[ev.Type]; ok {
		return h
	}
	return byType[""]
}

func runSafely(ctx context.Context, h handler, d *Delivery) (completed bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			completed, err = false, panicError(p)
		}
	}()
	return h.run(ctx, d)
}

package ferry

import (
	"context"
	"fmt"
	"reflect"
)

// Handle registers h for every event of source that no HandleType handler
// takes. Register before Start, and once per source and type: a second
// registration, one after Start, or a nil h panics, as http.ServeMux's
// does. The client claims only the sources it has handlers for: another
// source's events wait, pending, for a client that handles it.
func (c *Client) Handle(source string, h HandlerFunc) {
	c.register(source, "", plainHandler(h), h == nil, nil)
}

// HandleType registers h for events of source whose type is eventType,
// under the same rules as Handle. An event of a type no handler of its
// source takes goes dead at its first attempt ("no handler"): register
// Handle for the source to take the rest.
func (c *Client) HandleType(source, eventType string, h HandlerFunc) {
	c.register(source, eventType, plainHandler(h), h == nil, nil)
}

// HandleTx registers a transactional handler for source: h's writes and the
// fenced done commit in one transaction of store. eventType "" takes every
// type. It panics as Handle does. h must never Commit or Rollback its tx:
// the event would go dead (see TxHandlerFunc).
//
// Each running h holds a connection of the store's pool: on PostgreSQL the
// pool needs Workload{Workers: Config.Workers, TxHandlers: true}.Conns()
// connections for this client (plus what others sharing it need), or
// heartbeats and verdicts wait behind the handlers until leases lapse and
// effects repeat. Start refuses a pool smaller than this client's share.
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
	var refused error
	if !sameStore(store, c.store) {
		refused = fmt.Errorf("%w: HandleTx for source %q: the store (%T) is not the client's Config.Store (%T)", ErrInvalidParams, source, store, c.store)
	}
	c.register(source, eventType, txHandler[TX]{store: store, fn: h}, h == nil, refused)
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

// register adds h, whose function is nil if fnNil, for source and
// eventType; refused, if not nil, is why h is not registered, for Start to
// return.
func (c *Client) register(source, eventType string, h handler, fnNil bool, refused error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		panic("ferry: handler registered after Start")
	}
	if fnNil {
		// Else every event of the source would fail with a nil-pointer panic.
		panic(fmt.Sprintf("ferry: nil handler for source %q, type %q", source, eventType))
	}
	if refused != nil {
		if c.registerErr == nil {
			c.registerErr = refused
		}
		return
	}
	if c.handlers[source] == nil {
		c.handlers[source] = map[string]handler{}
	}
	if _, dup := c.handlers[source][eventType]; dup {
		// As http.ServeMux does: a silent replacement could swap a
		// transactional handler for one that is not.
		panic(fmt.Sprintf("ferry: a handler for source %q, type %q is already registered", source, eventType))
	}
	c.handlers[source][eventType] = h
}

// hasTxHandler reports whether a registered handler is transactional.
func (c *Client) hasTxHandler() bool {
	for _, byType := range c.handlers {
		for _, h := range byType {
			if h.transactional() {
				return true
			}
		}
	}
	return false
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

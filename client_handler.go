package ferry

import (
	"context"
)

// Handle registers h for every event of source that no HandleType handler
// takes. Register before Start.
func (c *Client) Handle(source string, h HandlerFunc) { c.register(source, "", plainHandler(h)) }

// HandleType registers h for events of source whose type is eventType.
func (c *Client) HandleType(source, eventType string, h HandlerFunc) {
	c.register(source, eventType, plainHandler(h))
}

// HandleTx registers a transactional handler for source: h's writes and the
// fenced done commit in one transaction of store, which must be the client's
// own Store. eventType "" takes every type.
func HandleTx[TX any](c *Client, store TxStore[TX], source, eventType string, h TxHandlerFunc[TX]) {
	c.register(source, eventType, txHandler[TX]{store: store, fn: h})
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

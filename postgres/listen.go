package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reconnect backoff of a receipt subscription whose connection broke.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// ReceiptSubscribe listens for receipts on a connection of its own, taken
// out of the pool for as long as ctx lives. The first connection is made
// before it returns, so a bad configuration is an error here; later breaks
// reconnect with backoff, and signal once after reconnecting because
// notifications may have been missed meanwhile. The channel closes when ctx
// is done or the Store is closed.
func (s *Store) ReceiptSubscribe(ctx context.Context) (<-chan struct{}, error) {
	ctx, cancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.closed, cancel)

	conn, err := s.listen(ctx)
	if err != nil {
		stopOnClose()
		cancel()
		return nil, wrap("receipt subscribe", err)
	}
	signals := make(chan struct{}, 1)
	s.listeners.Add(1)
	go func() {
		defer s.listeners.Done()
		defer close(signals)
		defer cancel()
		defer stopOnClose()
		s.relay(ctx, conn, signals)
	}()
	return signals, nil
}

// relay forwards notifications from conn to signals until ctx is done,
// replacing conn whenever it breaks.
func (s *Store) relay(ctx context.Context, conn *pgx.Conn, signals chan<- struct{}) {
	backoff := listenBackoffMin
	for {
		if conn != nil {
			_, err := conn.WaitForNotification(ctx)
			if err == nil {
				backoff = listenBackoffMin
				notify(signals)
				continue
			}
			closeConn(conn)
			conn = nil
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenBackoffMax)
		var err error
		if conn, err = s.listen(ctx); err == nil {
			notify(signals) // receipts may have come while we were away
		}
	}
}

// listen takes a connection out of the pool (it carries the pool's settings,
// search_path included) and LISTENs on this schema's receipt channel.
func (s *Store) listen(ctx context.Context) (*pgx.Conn, error) {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pooled.Hijack()
	var channel string
	if err := conn.QueryRow(ctx, receiptChannelSQL).Scan(&channel); err != nil {
		closeConn(conn)
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// notify signals without blocking: one pending signal stands for many.
func notify(signals chan<- struct{}) {
	select {
	case signals <- struct{}{}:
	default:
	}
}

// closeConn closes conn with a context of its own, since the caller's is
// usually done by then.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}

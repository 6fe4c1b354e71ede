package ferry

// Workload is what one process asks of its store at once: the numbers a
// connection pool is sized from (postgres.Config.MaxConns). The rule lives
// here, beside the client whose batches it counts, so that the binary and
// any embedding program size a pool the same way.
type Workload struct {
	// ReceiveBatches is how many receipt batches the process writes at once
	// (its receiver's ReceiveConcurrency); 0 when it receives nothing.
	ReceiveBatches int
	// Workers is the client's Config.Workers; 0 when the process works no
	// events.
	Workers int
	// TxHandlers is true when handlers hold a connection while they run
	// (HandleTx): each worker then needs one of its own.
	TxHandlers bool
}

// operatorConns are kept for operators' reads beside the work: stats for
// metrics, the dashboard, the purge.
const operatorConns = 2

// Conns is how many connections the workload uses at once: one per receipt
// batch; for a client its claims in flight, its completion and failure batches
// (batchWriters each), one heartbeat call for all its leases and one
// receipt listener, plus one per worker when handlers are transactional;
// and operatorConns. A pool this size never makes the work wait for a
// connection.
func (w Workload) Conns() int {
	n := max(w.ReceiveBatches, 0) + operatorConns
	if w.Workers > 0 {
		n += maxClaimsInFlight + 2*batchWriters + 1 + 1
		if w.TxHandlers {
			n += w.Workers
		}
	}
	return n
}

// Pooled is a store whose transactions draw on a bounded pool of
// connections (postgres.Store). Client.Start checks it once when
// transactional handlers are registered: each running one holds a
// connection, and a pool smaller than the Workload would make heartbeats
// and verdicts wait behind them until leases lapse and effects repeat.
type Pooled interface {
	// MaxConns is the pool's size.
	MaxConns() int
}

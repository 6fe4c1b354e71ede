package ferry

import "errors"

var (
	// ErrLeaseLost is returned by every write after a claim when the lease it
	// names is no longer held: it expired and another worker claimed the
	// event, or the event was released, completed or requeued. Nothing was
	// changed. A worker that sees it must stop working on the event.
	// ArchiveMaintain returns it when its maintenance lease passed to
	// another instance during the run.
	ErrLeaseLost = errors.New("ferry: lease lost")

	// ErrNotFound is returned when no event has the given key or row id.
	ErrNotFound = errors.New("ferry: event not found")

	// ErrRetentionTooShort is returned by EventPurge, ArchiveMaintain and
	// configuration checks when a retention is shorter than the replay
	// window: a purged key would let the provider's redelivery run the work
	// again. A store's error wraps ErrInvalidParams too.
	ErrRetentionTooShort = errors.New("ferry: retention shorter than the replay window")

	// ErrTxDone is returned by TxStore.EventCompleteTx when tx was already
	// committed or rolled back, and wrapped by TxStore.InTx's error when fn
	// failed after ending tx: a TxHandlerFunc that ended Ferry's
	// transaction itself, or went on after a failed statement that made
	// SQLite roll it back (a full disk). Its writes may have committed
	// without the event's done, so the client records the event dead
	// rather than repeat them with every retry. It wraps the driver's
	// error.
	ErrTxDone = errors.New("ferry: transaction already committed or rolled back")

	// ErrInvalidParams is returned for params a store cannot act on (an empty
	// source or event id, a non-positive TTL). It wraps a reason.
	ErrInvalidParams = errors.New("ferry: invalid params")

	// ErrNotDurable is returned by a store's Open when the database can lose
	// a write it has committed: SQLite not syncing fully, not in WAL mode or
	// not on a file; PostgreSQL with synchronous_commit or fsync off. Ferry
	// answers 2xx once a receipt commits, so a commit must be on disk. It
	// wraps the setting to change.
	ErrNotDurable = errors.New("ferry: store not durable")

	// ErrSchemaNewer is returned by Migrate and MigratePlan when the store
	// records a migration this build does not have: a newer Ferry migrated
	// it (a binary rolled back after an upgrade), and this one could misread
	// or drop what that schema stores. Nothing was changed. It wraps the
	// versions; the fix is to run the newer Ferry.
	ErrSchemaNewer = errors.New("ferry: schema newer than this build")

	// ErrMigrationExclusive is returned by MigrateRolling when a migration
	// the schema lacks needs every older instance stopped
	// (MigrationStep.Exclusive). Nothing was changed; it names the step.
	ErrMigrationExclusive = errors.New("ferry: exclusive migration")

	// ErrReadOnly is returned by Store.Ping when the database answers but
	// cannot commit a write now: a PostgreSQL standby (what a failover
	// leaves behind the old address), a session read-only by default, a
	// SQLite file this process cannot write. Every delivery would get 503
	// until it is fixed. It wraps the cause.
	ErrReadOnly = errors.New("ferry: store is read-only")

	// ErrMisconfigured is returned by Store.Ping when the database answers
	// and can write, but its sessions run with a setting Ferry's statements
	// are not written for, or as a role that may not do what they do:
	// PostgreSQL's default_transaction_isolation above read committed (set
	// on the role, the database or the URL), under which claims,
	// completions and a transactional handler's commit fail with
	// serialization errors; a missing GRANT on Ferry's tables, id sequence
	// or functions. postgres.Open returns it too, for a URL that sets such
	// an isolation or a login the server refuses, and Store.ArchiveMaintain
	// for a role that may not maintain the archive. It wraps the cause and
	// the fix.
	ErrMisconfigured = errors.New("ferry: store misconfigured")
)

package sqlite

import (
	"time"

	"github.com/ferry-inbox/ferry"
)

// ClaimDueSQL is the claim's due-event query, for plan checks.
func ClaimDueSQL() string { return eventClaimManyDueSQL }

// EventStatsSQL is EventStats's aggregate, for plan checks.
var EventStatsSQL = eventStatsSQL

// ArchiveRun is archiveRun, for checking how often maintenance renews its
// lease.
var ArchiveRun = (*Store).archiveRun

// EventListQuery is EventList's statement and arguments, for plan checks.
func EventListQuery(params *ferry.EventListParams) (string, []any) {
	params, err := params.Normalize()
	if err != nil {
		panic(err)
	}
	return eventListQuery(params)
}

// ClaimPreviousSQL is the claim's query of which events' last attempt that
// ran never ended, for plan checks.
var ClaimPreviousSQL = eventClaimManyPreviousSQL

// Durable is durable, the read-back check behind Open's refusals, for a
// test on a connection Open did not set up.
var Durable = durable

// SetMigrateBusyLimit bounds s's Migrate wait for another process's write
// lock to d.
func SetMigrateBusyLimit(s *Store, d time.Duration) { s.migrateBusyLimit = d }

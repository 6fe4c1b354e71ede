package sqlite

// ClaimDueSQL is the claim's due-event query, for plan checks.
func ClaimDueSQL() string { return eventClaimManyDueSQL }

// EventStatsSQL is EventStats's aggregate, for plan checks.
var EventStatsSQL = eventStatsSQL

// ArchiveRun is archiveRun, for checking how often maintenance renews its
// lease.
var ArchiveRun = (*Store).archiveRun

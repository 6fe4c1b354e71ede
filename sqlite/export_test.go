package sqlite

// ClaimDueSQL is the claim's due-event query, for plan checks.
func ClaimDueSQL() string { return eventClaimManyDueSQL }

// ArchiveRun is archiveRun, for checking how often maintenance renews its
// lease.
var ArchiveRun = (*Store).archiveRun

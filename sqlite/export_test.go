package sqlite

// ClaimDueSQL is the claim's due-event query, for plan checks.
func ClaimDueSQL() string { return eventClaimManyDueSQL }

// PurgeDone is purgeDone, for checking how often it renews the maintenance
// lease.
var PurgeDone = (*Store).purgeDone

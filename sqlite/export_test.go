package sqlite

// ClaimDueSQL is the claim's due-event query, for plan checks.
func ClaimDueSQL() string { return eventClaimManyDueSQL }

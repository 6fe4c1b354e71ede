package ferryhttp

// ParseRetryAfter lets the tests read a Retry-After header the way the
// forwarder does.
var ParseRetryAfter = parseRetryAfter

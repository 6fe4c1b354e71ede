package ferry_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The client starts most of Ferry's goroutines (claim loop, one per job, one
// heartbeat per job, the completion batcher): every test must leave none.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

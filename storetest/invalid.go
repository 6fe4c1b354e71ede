package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-inbox/ferry"
)

// testInvalidParams checks that every operation refuses params it cannot
// act on with ErrInvalidParams and changes nothing: the rules of the root
// package's Validate and Normalize methods, reached through each store.
func testInvalidParams[TX any](t *testing.T, setup func(*testing.T) *bundle[TX]) {
	b := setup(t)
	id := receive(t, b, "stripe", "evt_1")
	lease := claimOne(t, b, "w1").Event.Lease()
	before := get(t, b, id)

	bad := ferry.Lease{ID: id, Attempt: 0}
	ctx := b.ctx
	s := b.store
	type invalidCase struct {
		name string
		call func() error
	}
	cases := []invalidCase{
		{"AttemptList", func() error { return errOnly(s.AttemptList(ctx, &ferry.AttemptListParams{})) }},
		{"ConflictList", func() error { return errOnly(s.ConflictList(ctx, &ferry.ConflictListParams{ID: -1})) }},
		{"EventClaimMany/NoOwner", func() error { return errOnly(s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Limit: 1, TTL: ttl})) }},
		{"EventClaimMany/NoLimit", func() error { return errOnly(s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", TTL: ttl})) }},
		{"EventClaimMany/NoTTL", func() error { return errOnly(s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1})) }},
		{"EventClaimMany/NegativeMaxBytes", func() error {
			return errOnly(s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: 1, TTL: ttl, MaxBytes: -1}))
		}},
		{"EventComplete", func() error { return s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: bad}) }},
		{"EventCompleteTx", func() error {
			return s.InTx(ctx, func(tx TX) error {
				return s.EventCompleteTx(ctx, tx, &ferry.EventCompleteParams{Lease: bad})
			})
		}},
		{"EventCompleteMany", func() error {
			return errOnly(s.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: []ferry.Lease{lease, bad}}))
		}},
		{"EventHeartbeatMany/BadLease", func() error {
			return errOnly(s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{lease, bad}, TTL: ttl}))
		}},
		{"EventHeartbeatMany/NoTTL", func() error {
			return errOnly(s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{lease}}))
		}},
		{"EventFailMany/BadFailure", func() error {
			return errOnly(s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: lease}, {Lease: lease, RetryDelay: -time.Second}}}))
		}},
		{"EventFailMany/LeaseNamedTwice", func() error {
			return errOnly(s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: lease}, {Lease: lease, Dead: true}}}))
		}},
		{"EventFail/NoLease", func() error { return errOnly(s.EventFail(ctx, &ferry.EventFailParams{Lease: bad})) }},
		{"EventFail/NegativeDelay", func() error {
			return errOnly(s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, RetryDelay: -time.Second}))
		}},
		{"EventFail/NegativeBudget", func() error { return errOnly(s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: -1})) }},
		{"EventGet", func() error {
			_, err := s.EventGet(ctx, &ferry.EventGetParams{Source: "stripe"})
			if !errors.Is(err, ferry.ErrNotFound) {
				return fmt.Errorf("not ErrNotFound as well: %v", err)
			}
			return err
		}},
		{"EventHeartbeat/NoTTL", func() error { return errOnly(s.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: lease})) }},
		{"EventHeartbeat/NoLease", func() error { return errOnly(s.EventHeartbeat(ctx, &ferry.EventHeartbeatParams{Lease: bad, TTL: ttl})) }},
		{"EventList/NegativeLimit", func() error { return errOnly(s.EventList(ctx, &ferry.EventListParams{Limit: -1})) }},
		{"EventList/UnknownState", func() error { return errOnly(s.EventList(ctx, &ferry.EventListParams{States: []ferry.State{"stuck"}})) }},
		{"EventPurge/NoReplayWindow", func() error { return errOnly(s.EventPurge(ctx, &ferry.EventPurgeParams{Source: "stripe"})) }},
		{"EventPurge/NoSource", func() error { return errOnly(s.EventPurge(ctx, &ferry.EventPurgeParams{Retention: time.Hour})) }},
		{"EventPurge/RetentionShorterThanTheReplayWindow", func() error {
			_, err := s.EventPurge(ctx, &ferry.EventPurgeParams{Source: "stripe", Retention: time.Hour, ReplayWindow: 2 * time.Hour})
			if !errors.Is(err, ferry.ErrRetentionTooShort) {
				return fmt.Errorf("not ErrRetentionTooShort: %v", err)
			}
			return err
		}},
		{"ArchiveMaintain/KeyRetentionShorterThanTheReplayWindow", func() error {
			_, err := s.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "m", Retention: time.Hour, KeyRetention: time.Hour})
			if !errors.Is(err, ferry.ErrRetentionTooShort) {
				return fmt.Errorf("not ErrRetentionTooShort: %v", err)
			}
			return err
		}},
		{"EventReceive/NoSource", func() error { return errOnly(s.EventReceive(ctx, &ferry.EventReceiveParams{EventID: "evt_2"})) }},
		{"EventReceive/NoEventID", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe"})
			if !errors.Is(err, ferry.ErrBadEventID) {
				return fmt.Errorf("not ErrBadEventID: %v", err)
			}
			return err
		}},
		// The receiver refuses these first; the store refuses them too, the
		// same way on every store (PostgreSQL's text cannot hold a NUL, and
		// its unique index a key of a few KB, that SQLite would keep).
		{"EventReceive/UnstorableEventID", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_\x00", Payload: []byte("{}")})
			if !errors.Is(err, ferry.ErrBadEventID) {
				return fmt.Errorf("not ErrBadEventID: %v", err)
			}
			return err
		}},
		{"EventReceive/LongEventID", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: strings.Repeat("e", ferry.MaxEventIDBytes+1), Payload: []byte("{}")})
			if !errors.Is(err, ferry.ErrBadEventID) {
				return fmt.Errorf("not ErrBadEventID: %v", err)
			}
			return err
		}},
		{"EventReceive/UnstorableType", func() error {
			_, err := s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_3", Type: strings.Repeat("t", ferry.MaxEventTypeBytes+1), Payload: []byte("{}")})
			if !errors.Is(err, ferry.ErrBadEventType) {
				return fmt.Errorf("not ErrBadEventType: %v", err)
			}
			return err
		}},
		{"EventReceiveMany", func() error {
			res, err := s.EventReceiveMany(ctx, &ferry.EventReceiveManyParams{Receipts: []*ferry.EventReceiveParams{{Source: "stripe"}}})
			if err != nil {
				return err
			}
			return res[0].Err
		}},
		{"EventRelease", func() error { return s.EventRelease(ctx, &ferry.EventReleaseParams{Lease: bad}) }},
		{"EventRequeue/UnknownState", func() error {
			return errOnly(s.EventRequeue(ctx, &ferry.EventRequeueParams{States: []ferry.State{ferry.StateDead, "gone"}, Actor: "op"}))
		}},
		{"EventRequeue/NoActor", func() error { return errOnly(s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{id}})) }},
		{"EventReceive/NegativeReplayWindow", func() error {
			return errOnly(s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_3", ReplayWindow: -time.Second}))
		}},
		{"ActionList", func() error { return errOnly(s.ActionList(ctx, &ferry.ActionListParams{})) }},
		{"ReplayList", func() error { return errOnly(s.ReplayList(ctx, &ferry.ReplayListParams{})) }},
		{"EventRequeue/EmptyRunnableSource", func() error {
			return errOnly(s.EventRequeue(ctx, &ferry.EventRequeueParams{Runnable: []string{"stripe", ""}, Actor: "op"}))
		}},
		{"EventRequeue/BadID", func() error {
			return errOnly(s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{0}, Actor: "op"}))
		}},
		{"EventComplete/ResponseTooLong", func() error {
			return s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease, Response: ferry.AttemptResponse{Body: string(make([]byte, ferry.ResponseLimit+1))}})
		}},
		{"EventCompleteMany/ResponsesMismatch", func() error {
			return errOnly(s.EventCompleteMany(ctx, &ferry.EventCompleteManyParams{Leases: []ferry.Lease{lease}, Responses: make([]ferry.AttemptResponse, 2)}))
		}},
		{"EventFail/BadStatus", func() error {
			return errOnly(s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, Response: ferry.AttemptResponse{HTTPStatus: 42}}))
		}},
		{"EventFail/InvalidUTF8", func() error {
			return errOnly(s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, Response: ferry.AttemptResponse{Body: "\xff"}}))
		}},
		// PostgreSQL keeps text without NUL or invalid UTF-8: the same
		// refusal on every store, not a failed batch.
		{"EventFailMany/ErrorWithNUL", func() error {
			return errOnly(s.EventFailMany(ctx, &ferry.EventFailManyParams{Failures: []ferry.EventFailParams{{Lease: lease, Error: "said \x00"}}}))
		}},
		{"EventFail/ErrorNotUTF8", func() error {
			return errOnly(s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, Error: "said \xff"}))
		}},
		{"EventReceive/SourceNotUTF8", func() error {
			return errOnly(s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "s\xff", EventID: "evt_4", Payload: []byte("{}")}))
		}},
		{"EventReceive/NULInAHeader", func() error {
			return errOnly(s.EventReceive(ctx, &ferry.EventReceiveParams{Source: "stripe", EventID: "evt_5", Payload: []byte("{}"), Headers: map[string][]string{"X-Note": {"a\x00b"}}}))
		}},
		{"LeaseAcquire/NoTTL", func() error { return errOnly(s.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: "n", Owner: "o"})) }},
		{"LeaseAcquire/OwnerNotUTF8", func() error {
			return errOnly(s.LeaseAcquire(ctx, &ferry.LeaseAcquireParams{Name: "n", Owner: "o\xff", TTL: ttl}))
		}},
		{"LeaseRelease/NoOwner", func() error { return s.LeaseRelease(ctx, &ferry.LeaseReleaseParams{Name: "n"}) }},
		{"CheckpointGet/NoName", func() error { return errOnly(s.CheckpointGet(ctx, &ferry.CheckpointGetParams{})) }},
		{"CheckpointGet/NameWithNUL", func() error { return errOnly(s.CheckpointGet(ctx, &ferry.CheckpointGetParams{Name: "a\x00"})) }},
		{"EventClaimMany/OwnerNotUTF8", func() error {
			return errOnly(s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w\xff", Limit: 1, TTL: ttl}))
		}},
		{"CheckpointPut/ValueWithNUL", func() error {
			return s.CheckpointPut(ctx, &ferry.CheckpointPutParams{Name: "n", Value: "a\x00"})
		}},
		{"EventRequeue/ActorWithNUL", func() error {
			return errOnly(s.EventRequeue(ctx, &ferry.EventRequeueParams{IDs: []int64{id}, Actor: "op\x00"}))
		}},
		{"EventList/SourceWithNUL", func() error { return errOnly(s.EventList(ctx, &ferry.EventListParams{Source: "a\x00"})) }},
		{"EventList/EventIDNotUTF8", func() error { return errOnly(s.EventList(ctx, &ferry.EventListParams{EventIDContains: "\xff"})) }},
		{"EventRequeue/TypeWithNUL", func() error {
			return errOnly(s.EventRequeue(ctx, &ferry.EventRequeueParams{Type: "t\x00", Actor: "op"}))
		}},
		{"EventGet/KeyNotUTF8", func() error {
			_, err := s.EventGet(ctx, &ferry.EventGetParams{Source: "stripe", EventID: "evt_\xff"})
			if !errors.Is(err, ferry.ErrNotFound) {
				return fmt.Errorf("not ErrNotFound as well: %v", err)
			}
			return err
		}},
		{"EventList/BothCursors", func() error { return errOnly(s.EventList(ctx, &ferry.EventListParams{Before: 5, After: 2})) }},
		{"EventList/UntilBeforeSince", func() error {
			return errOnly(s.EventList(ctx, &ferry.EventListParams{Since: b.clock.Now(), Until: b.clock.Now().Add(-time.Second)}))
		}},
		{"EventRequeue/UntilBeforeSince", func() error {
			return errOnly(s.EventRequeue(ctx, &ferry.EventRequeueParams{Since: b.clock.Now(), Until: b.clock.Now().Add(-time.Second), Actor: "op"}))
		}},
		{"EventRetryNow/NoActor", func() error { return errOnly(s.EventRetryNow(ctx, &ferry.EventRetryNowParams{ID: id})) }},
		{"EventRetryNow/BadID", func() error { return errOnly(s.EventRetryNow(ctx, &ferry.EventRetryNowParams{Actor: "ops"})) }},
		{"EventStats", func() error { return errOnly(s.EventStats(ctx, &ferry.EventStatsParams{AtRiskLimit: -1})) }},
		// PostgreSQL's text cannot hold these; SQLite's can. Refused the
		// same way on both, not a driver error on one and nothing on the
		// other.
		{"EventStats/AtRiskSourceWithNUL", func() error {
			return errOnly(s.EventStats(ctx, &ferry.EventStatsParams{AtRiskAfter: map[string]time.Duration{"a\x00": time.Hour}}))
		}},
		{"EventPurge/SourceNotUTF8", func() error {
			return errOnly(s.EventPurge(ctx, &ferry.EventPurgeParams{Source: "s\xff", Retention: time.Hour, ReplayWindow: time.Hour}))
		}},
		{"ConflictNoticeList/SourceWithNUL", func() error { return errOnly(s.ConflictNoticeList(ctx, &ferry.NoticeListParams{Source: "a\x00"})) }},
		{"ReplayNoticeList/SourceNotUTF8", func() error { return errOnly(s.ReplayNoticeList(ctx, &ferry.NoticeListParams{Source: "s\xff"})) }},
		{"ReplayNoticeList/NegativeLimit", func() error {
			return errOnly(s.ReplayNoticeList(ctx, &ferry.NoticeListParams{Source: "stripe", Limit: -5}))
		}},
		{"ArchiveMaintain/OwnerWithNUL", func() error {
			_, err := s.ArchiveMaintain(ctx, &ferry.ArchiveMaintainParams{Owner: "m\x00", Retention: time.Hour})
			if err != nil && strings.Contains(err.Error(), "lease acquire") {
				return fmt.Errorf("refused late, by the lease: %v", err)
			}
			return err
		}},
	}
	// PostgreSQL keeps attempts, budgets and limits in 32 bits: past them,
	// the same refusal on every store, not a truncated fence. Only a 64-bit
	// int passes MaxCount; shift and past are variables so that storetest
	// compiles where int is 32 bits.
	if strconv.IntSize == 64 {
		shift := 32
		past := ferry.MaxCount
		past++
		wide := ferry.Lease{ID: lease.ID, Attempt: lease.Attempt + 1<<shift} // truncated to 32 bits: lease itself
		cases = append(cases, []invalidCase{
			{"EventHeartbeatMany/AttemptOver32Bits", func() error {
				return errOnly(s.EventHeartbeatMany(ctx, &ferry.EventHeartbeatManyParams{Leases: []ferry.Lease{wide}, TTL: time.Hour}))
			}},
			{"EventComplete/AttemptOver32Bits", func() error {
				return s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: wide})
			}},
			{"EventClaimMany/LimitOver32Bits", func() error {
				return errOnly(s.EventClaimMany(ctx, &ferry.EventClaimManyParams{Owner: "w", Limit: past, TTL: ttl}))
			}},
			{"EventFail/BudgetOver32Bits", func() error {
				return errOnly(s.EventFail(ctx, &ferry.EventFailParams{Lease: lease, MaxAttempts: past}))
			}},
		}...)
	}
	for _, tc := range cases {
		if err := tc.call(); !errors.Is(err, ferry.ErrInvalidParams) {
			t.Errorf("%s: err = %v, want ErrInvalidParams", tc.name, err)
		}
	}
	// Nothing changed: the lease still holds, the event is as it was.
	if after := get(t, b, id); after.State != ferry.StateInProgress || !after.LeaseExpiresAt.Equal(before.LeaseExpiresAt) || after.LastError != "" {
		t.Errorf("event after refused calls = %+v, want it untouched", after)
	}
	if list, err := s.EventList(ctx, &ferry.EventListParams{}); err != nil || len(list.Events) != 1 {
		t.Errorf("events = %v, %v; want only the first", list, err)
	}
	if err := s.EventComplete(ctx, &ferry.EventCompleteParams{Lease: lease}); err != nil {
		t.Errorf("the lease no longer holds after refused calls: %v", err)
	}
}

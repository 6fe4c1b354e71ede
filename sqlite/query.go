package sqlite

import (
	"embed"
	_ "embed"

	"github.com/ferry-inbox/ferry/internal/sqlfile"
)

// Every statement the store runs, one file each, and the migrations: all the
// store embeds, in one place; a missing file fails the build. A query file
// has the name of the Store method it serves, as in package postgres; where
// SQLite needs several statements for what PostgreSQL does in one (it has no
// data-modifying WITH), the others carry that name and a suffix.

// migrations holds the schema, one file per version: NNN_name.sql.
//
//go:embed migration/*.sql
var migrations embed.FS

var (
	//go:embed query/action_list.sql
	actionListSQL string
	//go:embed query/attempt_release.sql
	attemptReleaseSQL string
	//go:embed query/attempt_list.sql
	attemptListSQL string
	//go:embed query/conflict_list.sql
	conflictListSQL string
	//go:embed query/event_claim_many.sql
	eventClaimManySQL string
	//go:embed query/event_claim_many_attempt.sql
	eventClaimManyAttemptSQL string
	//go:embed query/event_claim_many_close_previous.sql
	eventClaimManyClosePreviousSQL string
	//go:embed query/event_claim_many_due.sql
	eventClaimManyDueSQL string
	//go:embed query/event_claim_many_hold.sql
	eventClaimManyHoldSQL string
	//go:embed query/event_claim_many_hold_attempt.sql
	eventClaimManyHoldAttemptSQL string
	//go:embed query/event_claim_many_previous.sql
	eventClaimManyPreviousSQL string
	//go:embed query/event_complete_many.sql
	eventCompleteManyFile string
	//go:embed query/event_complete_many_attempt.sql
	eventCompleteManyAttemptSQL string
	//go:embed query/event_fail_many.sql
	eventFailManyFile string
	//go:embed query/event_fail_many_attempt.sql
	eventFailManyAttemptSQL string
	//go:embed query/event_get_by_id.sql
	eventGetByIDSQL string
	//go:embed query/event_get_by_key.sql
	eventGetByKeySQL string
	//go:embed query/event_heartbeat.sql
	eventHeartbeatFile string
	//go:embed query/event_heartbeat_many.sql
	eventHeartbeatManyFile string
	//go:embed query/event_lease_held.sql
	eventLeaseHeldSQL string
	//go:embed query/event_list.sql
	eventListSQL string
	//go:embed query/event_list_at_risk.sql
	eventListAtRiskSQL string
	//go:embed query/event_purge.sql
	eventPurgeSQL string
	//go:embed query/event_receive.sql
	eventReceiveSQL string
	//go:embed query/event_receive_conflict.sql
	eventReceiveConflictSQL string
	//go:embed query/event_receive_redeliver.sql
	eventReceiveRedeliverSQL string
	//go:embed query/event_receive_replay.sql
	eventReceiveReplaySQL string
	//go:embed query/event_receive_replay_count.sql
	eventReceiveReplayCountSQL string
	//go:embed query/event_receive_replay_record.sql
	eventReceiveReplayRecordSQL string
	//go:embed query/event_release.sql
	eventReleaseFile string
	//go:embed query/event_requeue.sql
	eventRequeueFile string
	//go:embed query/event_requeue_count.sql
	eventRequeueCountFile string
	//go:embed query/event_requeue_match.sql
	eventRequeueMatchSQL string
	//go:embed query/event_requeue_action.sql
	eventRequeueActionSQL string
	//go:embed query/event_resolve.sql
	eventResolveSQL string
	//go:embed query/event_retry_now.sql
	eventRetryNowSQL string
	//go:embed query/action_insert.sql
	actionInsertSQL string
	//go:embed query/event_stats.sql
	eventStatsSQL string
	//go:embed query/replay_list.sql
	replayListSQL string
	//go:embed query/migration_applied.sql
	migrationAppliedSQL string
	//go:embed query/migration_exists.sql
	migrationExistsSQL string
	//go:embed query/migration_record.sql
	migrationRecordSQL string
	//go:embed query/migration_table.sql
	migrationTableSQL string
	//go:embed query/checkpoint_get.sql
	checkpointGetSQL string
	//go:embed query/checkpoint_put.sql
	checkpointPutSQL string
	//go:embed query/archive_sources.sql
	archiveSourcesSQL string
	//go:embed query/lease_acquire.sql
	leaseAcquireSQL string
	//go:embed query/lease_release.sql
	leaseReleaseSQL string
	//go:embed query/notice_list.sql
	noticeListSQL string
	//go:embed query/ping.sql
	pingSQL string
)

// A requeue and its dry run's count take their events by one rule,
// event_requeue_match.sql, put where each statement names it: a count
// that matched otherwise would confirm what the requeue does not take.
// Its filter, EventList's, goes in at eventFilterMarker at run time.
const eventFilterMarker = "eventFilter"

var (
	eventRequeueSQL      = sqlfile.Splice(eventRequeueFile, "event_requeue_match.sql", eventRequeueMatchSQL)
	eventRequeueCountSQL = sqlfile.Splice(eventRequeueCountFile, "event_requeue_match.sql", eventRequeueMatchSQL)
)

// Every write after a claim is fenced by one rule, event_lease_held.sql,
// put where each statement names it.
var (
	eventCompleteManySQL  = sqlfile.Splice(eventCompleteManyFile, "event_lease_held.sql", eventLeaseHeldSQL)
	eventFailManySQL      = sqlfile.Splice(eventFailManyFile, "event_lease_held.sql", eventLeaseHeldSQL)
	eventHeartbeatSQL     = sqlfile.Splice(eventHeartbeatFile, "event_lease_held.sql", eventLeaseHeldSQL)
	eventHeartbeatManySQL = sqlfile.Splice(eventHeartbeatManyFile, "event_lease_held.sql", eventLeaseHeldSQL)
	eventReleaseSQL       = sqlfile.Splice(eventReleaseFile, "event_lease_held.sql", eventLeaseHeldSQL)
)

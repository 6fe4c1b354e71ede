package postgres

import (
	"embed"
	_ "embed"

	"github.com/ferry-inbox/ferry/internal/sqlfile"
)

// Every statement the store runs, one file each, so the SQL reads as SQL,
// and the migrations: all the store embeds, in one place. A query file has
// the name of the Store method it serves, as in package sqlite.

// migrations holds the schema, one file per version: NNN_name.sql.
//
//go:embed migration/*.sql
var migrations embed.FS

var (
	//go:embed query/archive_analyze.sql
	archiveAnalyzeSQL string
	//go:embed query/archive_create.sql
	archiveCreateSQL string
	//go:embed query/archive_default_purge.sql
	archiveDefaultPurgeSQL string
	//go:embed query/archive_detach.sql
	archiveDetachSQL string
	//go:embed query/archive_drop.sql
	archiveDropSQL string
	//go:embed query/archive_info.sql
	archiveInfoSQL string
	//go:embed query/archive_keys_forget.sql
	archiveKeysForgetSQL string
	//go:embed query/archive_keys_purge.sql
	archiveKeysPurgeSQL string
	//go:embed query/archive_keys_purge_wait.sql
	archiveKeysPurgeWaitSQL string
	//go:embed query/archive_plan.sql
	archivePlanSQL string
	//go:embed query/action_list.sql
	actionListSQL string
	//go:embed query/attempt_list.sql
	attemptListSQL string
	//go:embed query/conflict_list.sql
	conflictListSQL string
	//go:embed query/event_claim_many.sql
	eventClaimManySQL string
	//go:embed query/event_archive_done.sql
	eventArchiveDoneSQL string
	//go:embed query/event_complete_many.sql
	eventCompleteManyFile string
	//go:embed query/event_fail_many.sql
	eventFailManySQL string
	//go:embed query/event_get_by_id.sql
	eventGetByIDSQL string
	//go:embed query/event_get_by_key.sql
	eventGetByKeySQL string
	//go:embed query/event_heartbeat.sql
	eventHeartbeatFile string
	//go:embed query/event_heartbeat_many.sql
	eventHeartbeatManySQL string
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
	//go:embed query/event_receive_lock.sql
	eventReceiveLockSQL string
	//go:embed query/event_receive_lock_keys.sql
	eventReceiveLockKeysSQL string
	//go:embed query/event_receive_many.sql
	eventReceiveManySQL string
	//go:embed query/event_redeliver.sql
	eventRedeliverSQL string
	//go:embed query/event_release.sql
	eventReleaseFile string
	//go:embed query/event_requeue.sql
	eventRequeueFile string
	//go:embed query/event_requeue_count.sql
	eventRequeueCountFile string
	//go:embed query/event_requeue_match.sql
	eventRequeueMatchSQL string
	//go:embed query/event_resolve.sql
	eventResolveFile string
	//go:embed query/event_retry_now.sql
	eventRetryNowSQL string
	//go:embed query/event_stats.sql
	eventStatsSQL string
	//go:embed query/migration_applied.sql
	migrationAppliedSQL string
	//go:embed query/migration_exists.sql
	migrationExistsSQL string
	//go:embed query/migration_lock.sql
	migrationLockSQL string
	//go:embed query/migration_lock_shared.sql
	migrationLockSharedSQL string
	//go:embed query/migration_lock_timeout.sql
	migrationLockTimeoutSQL string
	//go:embed query/migrate_plan_archive.sql
	migratePlanArchiveSQL string
	//go:embed query/migration_record.sql
	migrationRecordSQL string
	//go:embed query/migration_table.sql
	migrationTableSQL string
	//go:embed query/replay_list.sql
	replayListSQL string
	//go:embed query/receipt_channel.sql
	receiptChannelSQL string
	//go:embed query/checkpoint_get.sql
	checkpointGetSQL string
	//go:embed query/checkpoint_put.sql
	checkpointPutSQL string
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
var (
	eventRequeueSQL      = sqlfile.Splice(eventRequeueFile, "event_requeue_match.sql", eventRequeueMatchSQL)
	eventRequeueCountSQL = sqlfile.Splice(eventRequeueCountFile, "event_requeue_match.sql", eventRequeueMatchSQL)
)

// An event completed and one resolved by hand are archived as one row, by
// event_archive_done.sql.
var (
	eventCompleteManySQL = sqlfile.Splice(eventCompleteManyFile, "event_archive_done.sql", eventArchiveDoneSQL)
	eventResolveSQL      = sqlfile.Splice(eventResolveFile, "event_archive_done.sql", eventArchiveDoneSQL)
)

// A heartbeat and a release are fenced by one rule,
// event_lease_held.sql, put where each statement names it.
var (
	eventHeartbeatSQL = sqlfile.Splice(eventHeartbeatFile, "event_lease_held.sql", eventLeaseHeldSQL)
	eventReleaseSQL   = sqlfile.Splice(eventReleaseFile, "event_lease_held.sql", eventLeaseHeldSQL)
)

// Every SQL statement of the store lives in query/*.sql and is embedded
// here; a missing file fails the build.

package sqlite

import _ "embed"

//go:embed query/attempt_finish.sql
var attemptFinishSQL string

//go:embed query/attempt_finish_many.sql
var attemptFinishManySQL string

//go:embed query/attempt_list.sql
var attemptListSQL string

//go:embed query/attempt_start.sql
var attemptStartSQL string

//go:embed query/conflict_insert.sql
var conflictInsertSQL string

//go:embed query/conflict_list.sql
var conflictListSQL string

//go:embed query/event_claim.sql
var eventClaimSQL string

//go:embed query/event_claim_close_previous.sql
var eventClaimClosePreviousSQL string

//go:embed query/event_claim_due.sql
var eventClaimDueSQL string

//go:embed query/event_claim_hold.sql
var eventClaimHoldSQL string

//go:embed query/event_claim_hold_attempt.sql
var eventClaimHoldAttemptSQL string

//go:embed query/event_complete.sql
var eventCompleteSQL string

//go:embed query/event_complete_many.sql
var eventCompleteManySQL string

//go:embed query/event_fail.sql
var eventFailSQL string

//go:embed query/event_fence.sql
var eventFenceSQL string

//go:embed query/event_get_by_id.sql
var eventGetByIdSQL string

//go:embed query/event_get_by_key.sql
var eventGetByKeySQL string

//go:embed query/event_heartbeat.sql
var eventHeartbeatSQL string

//go:embed query/event_list.sql
var eventListSQL string

//go:embed query/event_purge.sql
var eventPurgeSQL string

//go:embed query/event_receive_insert.sql
var eventReceiveInsertSQL string

//go:embed query/event_receive_redeliver.sql
var eventReceiveRedeliverSQL string

//go:embed query/event_release.sql
var eventReleaseSQL string

//go:embed query/event_requeue_bulk.sql
var eventRequeueBulkSQL string

//go:embed query/event_requeue_ids.sql
var eventRequeueIdsSQL string

//go:embed query/migration_record.sql
var migrationRecordSQL string

//go:embed query/migration_table.sql
var migrationTableSQL string

//go:embed query/migration_versions.sql
var migrationVersionsSQL string

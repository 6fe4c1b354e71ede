package postgres

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferry-inbox/ferry"
)

// ArchiveRun is ArchiveMaintain's run under the lease, for checking when
// it renews the lease.
var ArchiveRun = (*Store).archiveMaintain

// MigrationFailed is Migrate's error for a migration that failed.
var MigrationFailed = migrationFailed

// SetMigrateLockTimeout shortens Migrate's bound on each lock wait and its
// tries on s, so a test of them runs in well under a second per try.
func SetMigrateLockTimeout(s *Store, timeout time.Duration, tries int) {
	s.migrateLockTimeout, s.migrateTries = timeout, tries
}

// MigrationLockSQL takes Migrate's lock: a test holds it as a Migrate in
// progress does.
var MigrationLockSQL = migrationLockSQL

// SetsParam is setsParam, for the forms of a URL that set a setting.
var SetsParam = setsParam

// EventStatsSQL is EventStats's aggregate, for plan checks; StatsArgs are
// its arguments for params.
var EventStatsSQL = eventStatsSQL

func StatsArgs(s *Store, params *ferry.EventStatsParams) pgx.NamedArgs { return statsArgs(s, params) }

// PurgeKeys is one batch of the dedupe keys' purge, of one source or all.
var PurgeKeys = (*Store).purgeKeys

// ArchiveDefaultPurgeSQL is maintenance's purge of the default partition,
// which a lock-order test runs on its own.
var ArchiveDefaultPurgeSQL = archiveDefaultPurgeSQL

// ArchiveKeysPurgeSQL, EventClaimManySQL, EventListSQL and the requeue's
// two are the statements whose plans plan_test.go reads.
var (
	ArchiveKeysPurgeSQL  = archiveKeysPurgeSQL
	EventClaimManySQL    = eventClaimManySQL
	EventListSQL         = eventListSQL
	EventRequeueSQL      = eventRequeueSQL
	EventRequeueCountSQL = eventRequeueCountSQL
)

// LoginFix is loginFix, for the table of refusals no retry can pass.
var LoginFix = loginFix

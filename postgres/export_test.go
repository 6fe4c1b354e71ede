package postgres

// ArchiveRun is ArchiveMaintain's run under the lease, for checking when
// it renews the lease.
var ArchiveRun = (*Store).archiveMaintain

// MigrationLockKey is the advisory lock Migrate holds, for holding it as a
// Migrate in progress does.
const MigrationLockKey = migrationLockKey

// MigrationFailed is Migrate's error for a migration that failed.
var MigrationFailed = migrationFailed

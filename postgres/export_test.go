package postgres

// ArchiveRun is ArchiveMaintain's run under the lease, for checking when
// it renews the lease.
var ArchiveRun = (*Store).archiveMaintain

// MigrationFailed is Migrate's error for a migration that failed.
var MigrationFailed = migrationFailed

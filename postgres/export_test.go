package postgres

// ArchiveRun is ArchiveMaintain's run under the lease, for checking when
// it renews the lease.
var ArchiveRun = (*Store).archiveMaintain

package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"

	"github.com/ferry-inbox/ferry"
)

// MigrationsUnchanged fails t when a migration of fsys's dir differs from its
// pinned checksum, or has none. A store records a migration by version only,
// so a migration edited after it landed is never applied again to a store
// that already ran the old text: that store then lacks what the code needs,
// and Migrate calls it up to date. pinned maps each version to
// MigrationChecksum of its file; a new migration is pinned as it lands, and
// a pinned one is never edited (fix it with the next version).
func MigrationsUnchanged(t testing.TB, fsys fs.FS, dir string, pinned map[int]string) {
	t.Helper()
	all, err := ferry.ReadMigrations(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		sum := MigrationChecksum(m.SQL)
		switch want, ok := pinned[m.Version]; {
		case !ok:
			t.Errorf("migration %s is not pinned: add %d: %q", m, m.Version, sum)
		case sum != want:
			t.Errorf("migration %s changed after it landed (checksum %s, pinned %s): stores that applied it keep the old text; restore it and make the change a new migration", m, sum, want)
		}
	}
	for v := range pinned {
		if !hasVersion(all, v) {
			t.Errorf("pinned migration %d is gone: a store that applied it would be refused as newer", v)
		}
	}
}

// MigrationChecksum is the SHA-256 of sql's statements: lines trimmed, blank
// lines and whole-line "--" comments left out, so a comment may be edited.
func MigrationChecksum(sql string) string {
	var b strings.Builder
	for line := range strings.Lines(sql) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

func hasVersion(all []ferry.Migration, v int) bool {
	for _, m := range all {
		if m.Version == v {
			return true
		}
	}
	return false
}

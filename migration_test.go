package ferry_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ferry-inbox/ferry"
)

func TestReadMigrations(t *testing.T) {
	t.Parallel()
	file := func(sql string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(sql)} }
	all, err := ferry.ReadMigrations(fstest.MapFS{
		"m/010_ten.sql":   file("-- ten"),
		"m/002_two.sql":   file("-- two"),
		"m/001_first.sql": file("-- one"),
	}, "m")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range all {
		got = append(got, fmt.Sprintf("%d %s %s", m.Version, m.Name, m.SQL))
	}
	if want := "1 first -- one|2 two -- two|10 ten -- ten"; strings.Join(got, "|") != want {
		t.Errorf("ReadMigrations = %q, want %q (version order, not name order)", strings.Join(got, "|"), want)
	}

	for name, fsys := range map[string]fstest.MapFS{
		"no number":      {"m/first.sql": file("")},
		"no name":        {"m/001.sql": file("")},
		"empty name":     {"m/001_.sql": file("")},
		"not sql":        {"m/001_first.txt": file("")},
		"zero":           {"m/000_first.sql": file("")},
		"shared version": {"m/001_a.sql": file(""), "m/1_b.sql": file("")},
	} {
		if all, err := ferry.ReadMigrations(fsys, "m"); err == nil {
			t.Errorf("ReadMigrations with %s = %+v; want an error", name, all)
		}
	}
}

func TestPendingMigrations(t *testing.T) {
	t.Parallel()
	all := []ferry.Migration{{Version: 1, Name: "a"}, {Version: 2, Name: "b"}, {Version: 3, Name: "c"}}
	for _, c := range []struct {
		applied []int
		want    []int
	}{
		{nil, []int{1, 2, 3}},
		{[]int{1}, []int{2, 3}},
		{[]int{2}, []int{1, 3}},
		{[]int{1, 2, 3}, nil},
	} {
		pending, err := ferry.PendingMigrations(all, c.applied)
		var got []int
		for _, m := range pending {
			got = append(got, m.Version)
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("PendingMigrations(applied %v) = %v, %v; want %v", c.applied, got, err, c.want)
		}
	}
	pending, err := ferry.PendingMigrations(all, []int{1, 2, 3, 4, 7})
	if !errors.Is(err, ferry.ErrSchemaNewer) || pending != nil {
		t.Fatalf("PendingMigrations with 4 and 7 applied = %v, %v; want ErrSchemaNewer", pending, err)
	}
	if want := "the store has migrations 004, 007, this ferry knows up to 003"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

func TestMigrationStep(t *testing.T) {
	t.Parallel()
	m := ferry.Migration{Version: 3, Name: "archive", SQL: `-- Moves rows.
--
-- Exclusive: older instances would
-- write where this moves.
--
-- Existing installations: all of them.
ALTER TABLE t ADD COLUMN c int;
-- Exclusive: not in the leading comment.
`}
	step := m.Step()
	if step.Version != 3 || step.Name != "archive" || !strings.HasPrefix(step.Summary, "Moves rows.") || !strings.HasSuffix(step.Summary, "all of them.") {
		t.Errorf("Step() = %s, summary %q; want version, name and the leading comment as its summary", step, step.Summary)
	}
	if want := "older instances would write where this moves."; step.Exclusive != want {
		t.Errorf("Step().Exclusive = %q, want %q (its paragraph of the leading comment only)", step.Exclusive, want)
	}
	m.SQL = "-- Adds a column.\nALTER TABLE t ADD COLUMN c int;\n-- Exclusive: not in the leading comment.\n"
	if step := m.Step(); step.Exclusive != "" {
		t.Errorf("Step().Exclusive of a migration without the paragraph = %q, want empty", step.Exclusive)
	}
}

// A migration is named as its file is, in plans and errors alike, and an
// error applying it keeps its cause for errors.Is.
func TestMigrationNames(t *testing.T) {
	t.Parallel()
	m := ferry.Migration{Version: 3, Name: "archive", SQL: "-- Moves rows.\n"}
	if got := fmt.Sprint(m); got != "003_archive" { // a value, not only a pointer, names itself
		t.Errorf("Sprint(m) = %q, want 003_archive", got)
	}
	if got := m.Step().String(); got != "003_archive" {
		t.Errorf("Step().String() = %q, want 003_archive", got)
	}
	cause := errors.New("syntax error")
	if err := m.Failed(cause); !errors.Is(err, cause) || err.Error() != "migration 003_archive: syntax error" {
		t.Errorf("Failed() = %v, want it to name 003_archive and wrap the cause", err)
	}
}

// The "Exclusive:" marker flags a migration whatever follows it: a reason
// left out or put on the next line does not let serve apply it.
func TestMigrationStepExclusiveMarker(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"-- Moves rows.\n-- Exclusive:\n--\n-- More.\nSELECT 1;":         "older instances cannot run beside it",
		"-- Moves rows.\n-- Exclusive:\n-- the reason.\nSELECT 1;":       "the reason.",
		"-- Exclusive: one\n-- two.\n--\n-- Exclusive: again\nSELECT 1;": "one two.",
	} {
		m := ferry.Migration{Version: 1, Name: "x", SQL: sql}
		if got := m.Step().Exclusive; got != want {
			t.Errorf("Step().Exclusive of %q = %q, want %q", sql, got, want)
		}
	}
}

package sqlfile

import "testing"

func TestSplice(t *testing.T) {
	t.Parallel()
	got := Splice("SELECT 1 WHERE /* m.sql */ AND (/* m.sql */)", "m.sql", "-- the rule\na = 1\n")
	want := "SELECT 1 WHERE (\n-- the rule\na = 1\n) AND ((\n-- the rule\na = 1\n))"
	if got != want {
		t.Errorf("Splice =\n%s\nwant\n%s", got, want)
	}
}

// A statement that does not name the fragment would run without it: an
// unfiltered statement, or one that fails only when first run.
func TestSpliceNamedNowherePanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("Splice of a statement that does not name the fragment did not panic")
		}
	}()
	Splice("SELECT 1 WHERE /* other.sql */", "m.sql", "a = 1")
}

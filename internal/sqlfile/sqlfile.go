// Package sqlfile puts one query file inside others, for the stores: a
// condition several statements must share (the events a requeue takes, and
// that its dry run counts) lives in one .sql file, and each statement names
// where it goes.
package sqlfile

import "strings"

// Splice returns stmt with fragment, in parentheses, wherever stmt names
// it with the comment /* name */. A stmt that names it nowhere is the
// store's own mistake, so Splice panics: called as a package loads, it
// fails every test of that package.
func Splice(stmt, name, fragment string) string {
	marker := "/* " + name + " */"
	if !strings.Contains(stmt, marker) {
		panic("sqlfile: the statement does not name " + marker)
	}
	return strings.ReplaceAll(stmt, marker, "(\n"+strings.TrimRight(fragment, "\n")+"\n)")
}

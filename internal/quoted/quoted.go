// Package quoted hides the values an error message quotes. Go's %q and the
// TOML parser both put what they refused between double quotes, and that
// text may be a secret or words a link chose.
package quoted

import "regexp"

// Hide returns msg with each double-quoted string in it, escapes and all,
// replaced by with, and whether there was any.
func Hide(msg, with string) (string, bool) {
	if !text.MatchString(msg) {
		return msg, false
	}
	return text.ReplaceAllLiteralString(msg, with), true
}

// text matches a Go-quoted string.
var text = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

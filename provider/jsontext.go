package provider

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ferry-inbox/ferry"
)

// keptAsSent reports whether s, what encoding/json decoded from the JSON
// string literal raw, is the text the sender wrote. The decoder turns
// invalid UTF-8 and an unpaired surrogate escape into U+FFFD, so two ids
// the sender signed apart ("evt_\xff", "evt_\xfe") would be one event, the
// second dropped as its conflict. Only a decoded U+FFFD needs the look.
func keptAsSent(raw json.RawMessage, s string) bool {
	if !strings.ContainsRune(s, utf8.RuneError) {
		return true
	}
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped byte: \" \\ \n ... or u
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r, ok := hex4(raw, i+1)
		i += 4
		switch {
		case !ok:
			return false
		case !utf16.IsSurrogate(r):
		case r >= 0xDC00: // a low half first
			return false
		default: // a high half: its low half must follow
			low, ok := rune(0), i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u'
			if ok {
				low, ok = hex4(raw, i+3)
			}
			if !ok || low < 0xDC00 || low > 0xDFFF {
				return false
			}
			i += 6
		}
	}
	return true
}

// hex4 reads the four hex digits of a \u escape at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
	return rune(n), err == nil
}

// identityAsSent refuses, after a verifier read the event id and type from
// a JSON body, either one the decoder changed (keptAsSent): ids from the
// body become ferry.ErrBadEventID, as an id header with such bytes does
// (400 bad_event_id), types ferry.ErrBadEventType. idField and typeField
// name the body's fields; an empty one was not read from the body.
func identityAsSent(provider string, body []byte, v *ferry.Verified, idField, typeField string) error {
	if !strings.ContainsRune(v.EventID, utf8.RuneError) && !strings.ContainsRune(v.Type, utf8.RuneError) {
		return nil // every delivery passes here: no allocation
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // the verifier has read it already
	if idField != "" && !keptAsSent(fields[idField], v.EventID) {
		return verifyErr(provider, ferry.ErrBadEventID, "body field "+strconv.Quote(idField)+" is not UTF-8 text")
	}
	if typeField != "" && !keptAsSent(fields[typeField], v.Type) {
		return verifyErr(provider, ferry.ErrBadEventType, "body field "+strconv.Quote(typeField)+" is not UTF-8 text")
	}
	return nil
}

package ferry

import "time"

// Notices are the deliveries an operator hears about without reading every
// event: a conflicting duplicate (same key, other bytes) or a suspected
// replay (same bytes, other key). Pushed alerts page through them after a
// cursor, so each is announced once however many instances share the store.

// NoticeKeep is the most conflicts, and the most replays, a store keeps as
// rows on one event: the first ones to arrive, a conflicting payload once
// however often it comes. Past it a delivery is answered as any conflict or
// replay is and counted on its event (Event.Conflicts, Event.Replays), but
// keeps nothing: no row, no headers, no payload. The kept ones show an
// operator what arrived and from whom. Without a bound, one captured delivery of a
// provider that does not sign its id (GitHub, Shopify, body-mode HMAC),
// re-sent under fresh ids, or another signed body sent under a known id,
// would make the store keep a row per request, up to a whole payload
// each: an anonymous sender could fill the disk.
const NoticeKeep = 10

// noticeListMax caps ReplayListParams.Limit and ConflictListParams.Limit:
// an event may hold more rows than NoticeKeep (kept before the bound
// existed), and a list never reads more than this many.
const noticeListMax = 1000

// NoticeListParams pages through one source's notices of one kind, oldest
// first.
type NoticeListParams struct {
	// Source names the source. Required.
	Source string
	// AfterID is the cursor: only notices with a larger ID. Zero starts at
	// the first.
	AfterID int64
	// Limit is the page size. Defaults to noticePageDefault, 100; at most
	// noticeListMax, 1000.
	Limit int
}

// noticePageDefault is NoticeListParams.Limit's default.
const noticePageDefault = 100

// Normalize fills Limit's default and caps it. It requires a Source of
// UTF-8 text without NUL and refuses a negative Limit.
func (p *NoticeListParams) Normalize() error {
	if err := requiredText("source", p.Source); err != nil {
		return err
	}
	return noticeLimit(&p.Limit, noticePageDefault)
}

// Notice is one conflicting delivery or suspected replay, without payload
// or headers.
type Notice struct {
	// ID is the notice's own row id, increasing: the cursor.
	ID int64
	// EventRowID is the stored event it concerns (Event.ID).
	EventRowID int64
	Source     string
	// EventID is the provider's id of the stored event.
	EventID    string
	ReceivedAt time.Time
}

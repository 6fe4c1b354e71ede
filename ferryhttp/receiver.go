// Package ferryhttp is Ferry's HTTP edge: the receiver that verifies and
// durably accepts webhooks, the forwarder that delivers them to an app, and
// the health endpoints.
package ferryhttp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"

	"github.com/ferry-inbox/ferry"
	"github.com/ferry-inbox/ferry/internal/groupcommit"
	"github.com/ferry-inbox/ferry/internal/typednil"
)

// Source is one webhook sender the receiver accepts at /webhooks/{Name}.
type Source struct {
	// Name is the URL path segment and the stored source name. Required.
	Name string
	// Verifier checks signatures and reads the event id. Required.
	Verifier ferry.Verifier
	// MaxBodyBytes is the largest body accepted; a larger one is answered
	// 413 unread. Defaults to DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ReplayWindow turns on replay detection (ferry.ReceiveReplay) for a
	// provider whose signature covers the body but not the event id
	// (GitHub, Shopify, body-mode HMAC): the body of an event stored within
	// this long, delivered under another id, is answered 200
	// {"status":"replay"}, counted and (the first ferry.NoticeKeep) kept on
	// the stored event, logged as a warning while kept, and never processed.
	// Defaults to 0: off, as for providers that sign the id. Off, such a body
	// under a new id (and any type) is a new event, so set it for these
	// providers; ferry serve sets it to replay_window when detect_replays is
	// on, its default for them. Not ferry.SourcePolicy.ReplayWindow, the
	// provider's redelivery horizon for the client's retries (default 72h).
	ReplayWindow time.Duration

	// keep is the Receiver's KeepHeaders but the signature headers the
	// Verifier names (a ferry.SignatureNamer): worked out once, not per
	// delivery.
	keep []string
}

// ReceiverOptions configure a Receiver.
type ReceiverOptions struct {
	// Store receives verified deliveries. Required.
	Store ferry.Store
	// Sources are the accepted senders. At least one.
	Sources []Source
	// StoreTimeout bounds one durable receive; past it the provider gets 503
	// and retries. Defaults to DefaultStoreTimeout.
	StoreTimeout time.Duration
	// RetryAfter is sent with every 503, in whole seconds rounded up (so a
	// sub-second value is never sent as "retry at once"). Defaults to
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// KeepHeaders are the request headers stored with an event, a conflict
	// or a replay, within KeptHeaderValueMax and KeptHeadersMax. Defaults to
	// DefaultKeepHeaders. A header SensitiveHeader names is never stored,
	// listed or not: the providers' signatures, Authorization, Cookie, and
	// any whose name contains "Signature", "Hmac", "Secret", "Token" or
	// "Api-Key" (a generic sender's signature or credential, say); nor is
	// the signature header a source's Verifier names (a ferry.SignatureNamer,
	// as provider.HMAC is).
	KeepHeaders []string
	// Logger gets one line per delivery: source, event id, outcome, status
	// and latency, the reason of a rejection and its detail (as answered:
	// what to fix, say the header expected), and the store's error when the
	// answer is 503; never a secret, a signature or a payload byte. A
	// conflict or a replay the store keeps is a warning with an alert key;
	// one it only counts (past ferry.NoticeKeep on its event, or a
	// conflicting payload kept already) is an info line with kept=false, so
	// a re-sent capture raises at most ferry.NoticeKeep alerts per event.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Observer, if set, is told of every delivery's outcome (metrics).
	Observer ReceiveObserver
	// ReceiveBatch is the most concurrent deliveries stored with one commit
	// (group commit through Store.EventReceiveMany: one round trip and one
	// fsync for the lot; each request is still answered only after its own
	// delivery committed). Deliveries are grouped only when they arrive
	// while earlier ones are being written, so an idle receiver adds no
	// delay. Defaults to 64; 1 stores every delivery alone.
	ReceiveBatch int
	// TracerProvider, if set, traces every request: a server span through
	// verification, storage and the answer, whose trace context is stored
	// with the event for its attempts to link to. Anyone can send a
	// traceparent, so the span is never its child: it is a new root (or a
	// child of a span the program's own middleware put in the request's
	// context), sampled by the TracerProvider's sampler, with a link to the
	// sender's span; the sender's tracestate is dropped. Attributes: source,
	// event id, outcome, reason and HTTP status; never a payload, a header
	// value or a secret. Defaults to none: no span, no trace header read.
	TracerProvider trace.TracerProvider
	// ReceiveConcurrency is how many batches may be written at once. Fewer,
	// larger commits take deliveries in fastest (each commit waits for its
	// own flush): on the PostgreSQL ingest benchmark 1 or 2 ran at 1.8-1.9 ×
	// a bare one-insert-per-request receiver, 4 at 1.4-1.55 and 8 at 1.3. Two
	// keep one batch on the wire while another waits for its flush. Defaults
	// to 2.
	ReceiveConcurrency int
	// MaxInFlightBytes bounds the body bytes held at once, from their
	// arrival until their delivery is stored. A request holds what it has
	// sent (at most twice that while its buffer grows), never what its
	// Content-Length claims, so connections that name large bodies and send
	// nothing hold nothing. A request whose Content-Length does not fit
	// beside what is held is answered 503 + Retry-After ("memory_budget")
	// before its body is read, and one whose bytes stop fitting part-way is
	// answered so then; a request is always let through when nothing else
	// is held, so a body larger than the budget is slow, never refused for
	// ever. Defaults to DefaultMaxInFlightBytes.
	MaxInFlightBytes int64
	// BodyTimeout bounds how long a body may take to arrive once its
	// headers have (it sets the connection's read deadline, in place of the
	// server's, while the body is read): a sender that trickles its body
	// holds its share of MaxInFlightBytes for at most this long, and is
	// answered 408 ("body_timeout"). Providers send a body in milliseconds.
	// Defaults to DefaultBodyTimeout.
	BodyTimeout time.Duration
}

// DefaultReceiveConcurrency is ReceiverOptions.ReceiveConcurrency's
// default: the most receipt batches (each one database connection) a
// receiver writes at once.
const DefaultReceiveConcurrency = 2

// DefaultStoreTimeout and DefaultRetryAfter are ReceiverOptions' defaults.
const (
	DefaultStoreTimeout = 10 * time.Second
	DefaultRetryAfter   = 5 * time.Second
)

// DefaultMaxInFlightBytes is ReceiverOptions.MaxInFlightBytes's default:
// 8 MiB, eight bodies of the default 1 MiB cap and thousands of ordinary
// 1-10 KB deliveries. On the rss benchmark (64 connections sending 1 MiB
// bodies) 32 MiB peaked at 249 MB and 8 MiB at 144 MB, most of it then the
// workers' claimed payloads, not the receiver's.
const DefaultMaxInFlightBytes = 8 << 20

// DefaultMaxBodyBytes is Source.MaxBodyBytes's default: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// DefaultBodyTimeout is ReceiverOptions.BodyTimeout's default.
const DefaultBodyTimeout = 10 * time.Second

// ReceiveObserver is told of every delivery the receiver answers: its
// Outcome and, for a rejection or a 503, its Reason (else ""). Source is the
// name in the request's path, whatever the sender put there (an unknown one
// is answered 404 "unknown_source"): an observer that labels by it folds
// the names it does not know into one, as package prometheus's Metrics
// does.
type ReceiveObserver interface {
	ObserveReceive(source, outcome, reason string, latency time.Duration)
}

// SecretObserver is told, when the ReceiveObserver implements it too,
// which of a source's secrets verified each delivery whose signature
// checked out (ferry.Verified.Secret: 0 the first), so an operator
// rotating a secret sees when the sender stops signing with the old one.
// Package prometheus's Metrics implements it.
type SecretObserver interface {
	ObserveSecret(source string, secret int)
}

// DefaultKeepHeaders are stored with each event: the content type and the
// providers' identity headers. None of them carries a signature.
var DefaultKeepHeaders = []string{
	"Content-Type", "User-Agent",
	"X-GitHub-Event", "X-GitHub-Delivery", "X-GitHub-Hook-ID",
	"X-Shopify-Topic", "X-Shopify-Webhook-Id", "X-Shopify-Event-Id", "X-Shopify-Shop-Domain",
	"X-Shopify-Api-Version", "X-Shopify-Triggered-At",
	"Webhook-Id", "Webhook-Timestamp",
	"Svix-Id", "Svix-Timestamp",
}

// KeptByDefault reports whether a Receiver whose KeepHeaders are the
// default stores the header name: what another writer of a provider's
// deliveries (catch-up) keeps, to store them alike.
func KeptByDefault(name string) bool {
	return !SensitiveHeader(name) && slices.ContainsFunc(DefaultKeepHeaders, func(h string) bool { return strings.EqualFold(h, name) })
}

// Bounds of the headers kept with one delivery (KeepHeaders), stored as an
// event, a conflict or a replay alike. A sender chooses its header values,
// up to the server's header limit (64 KiB in ferry serve), and what is kept
// is written with every delivery, so unbounded a 60 KB User-Agent is stored
// per request. A provider's ids, topics, timestamps and user agent take well under 1 KiB
// each; 8 KiB holds DefaultKeepHeaders several times over.
const (
	// KeptHeaderValueMax is the most bytes of one kept header value. A
	// longer value is cut on a character boundary and ends with
	// " [cut by ferry from N bytes]", N its length, within the bound; but
	// Content-Type, which the forwarder sends as it is, is kept whole, or
	// dropped when it passes KeptHeadersMax.
	KeptHeaderValueMax = 1 << 10
	// KeptHeadersMax is the most bytes, names and values, kept with one
	// delivery. A value past it is dropped, and its header's name listed in
	// a Ferry-Headers-Dropped header kept in its place.
	KeptHeadersMax = 8 << 10
)

// droppedHeader lists the names of the headers whose values did not fit in
// KeptHeadersMax, Content-Type among them.
const droppedHeader = "Ferry-Headers-Dropped"

// signatureHeaders are never stored, whatever KeepHeaders says; nor is any
// header SensitiveHeader recognises by name.
var signatureHeaders = map[string]bool{
	"Stripe-Signature": true, "X-Hub-Signature": true, "X-Hub-Signature-256": true,
	"X-Shopify-Hmac-Sha256": true, "Webhook-Signature": true, "Svix-Signature": true,
	"Authorization": true, "Cookie": true,
}

// Receiver answers POST /webhooks/{source}: size limit, raw bytes,
// signature, timestamp, event id and type (ferry.ValidateEventID), durable
// receive, in that order. It answers 2xx only after the store has committed
// the delivery.
type Receiver struct {
	opts    ReceiverOptions
	sources map[string]Source
	keep    []string // KeepHeaders but Content-Type, canonical
	// keepType is whether KeepHeaders holds Content-Type, kept first.
	keepType bool
	draining atomic.Bool
	inFlight atomic.Int64 // body bytes arrived and not yet stored (body.go)
	receipts *groupcommit.Committer[*ferry.EventReceiveParams, *ferry.EventReceiveResult]
	tracer   trace.Tracer   // nil when tracing is off
	secrets  SecretObserver // the Observer's, or nil
}

// NewReceiver checks opts and fills in defaults. What it refuses is an
// error wrapping ferry.ErrInvalidParams.
func NewReceiver(opts ReceiverOptions) (*Receiver, error) {
	if typednil.Is(opts.Store) {
		return nil, fmt.Errorf("%w: ferryhttp: ReceiverOptions.Store is required", ferry.ErrInvalidParams)
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = DefaultRetryAfter
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxInFlightBytes <= 0 {
		opts.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	r := &Receiver{opts: opts, sources: map[string]Source{}}
	r.secrets, _ = opts.Observer.(SecretObserver)
	if opts.TracerProvider != nil {
		r.tracer = opts.TracerProvider.Tracer(ferry.TracerName)
	}
	r.receipts = &groupcommit.Committer[*ferry.EventReceiveParams, *ferry.EventReceiveResult]{
		MaxBatch:      cmp.Or(opts.ReceiveBatch, 64),
		MaxConcurrent: cmp.Or(opts.ReceiveConcurrency, DefaultReceiveConcurrency),
		Run:           r.receiveMany,
	}
	for _, h := range cmpOrSlice(opts.KeepHeaders, DefaultKeepHeaders) {
		switch h = http.CanonicalHeaderKey(h); {
		case h == "Content-Type":
			r.keepType = true
		case !SensitiveHeader(h):
			r.keep = append(r.keep, h)
		}
	}
	for _, s := range opts.Sources {
		if s.Name == "" || typednil.Is(s.Verifier) {
			return nil, fmt.Errorf("%w: ferryhttp: source %q needs a Name and a non-nil Verifier", ferry.ErrInvalidParams, s.Name)
		}
		if _, dup := r.sources[s.Name]; dup {
			return nil, fmt.Errorf("%w: ferryhttp: source %q configured twice", ferry.ErrInvalidParams, s.Name)
		}
		if s.MaxBodyBytes <= 0 {
			s.MaxBodyBytes = DefaultMaxBodyBytes
		}
		if s.ReplayWindow < 0 {
			return nil, fmt.Errorf("%w: ferryhttp: source %q: ReplayWindow %s is negative; 0 turns replay detection off", ferry.ErrInvalidParams, s.Name, s.ReplayWindow)
		}
		s.keep = r.keep
		if namer, ok := s.Verifier.(ferry.SignatureNamer); ok {
			signatures := namer.SignatureHeaders()
			s.keep = slices.DeleteFunc(slices.Clone(r.keep), func(k string) bool {
				return slices.ContainsFunc(signatures, func(sig string) bool { return strings.EqualFold(sig, k) })
			})
		}
		r.sources[s.Name] = s
	}
	if len(r.sources) == 0 {
		return nil, fmt.Errorf("%w: ferryhttp: no source configured", ferry.ErrInvalidParams)
	}
	return r, nil
}

// Register mounts the receiver on mux at /webhooks/{source}, and at
// /webhooks and /webhooks/, so a path under it that names no source (a
// trailing slash, a second segment) is answered 404 "bad_path" in JSON
// rather than by the mux's plain-text 404. A path the mux would clean (a
// doubled slash, a dot segment) it redirects before any handler runs, and
// no provider follows a redirect: serve Handler(mux) to answer those too.
func (r *Receiver) Register(mux *http.ServeMux) {
	mux.Handle("/webhooks/{source}", r)
	mux.Handle("/webhooks/", r)
	mux.Handle("/webhooks", r)
}

// Handler sends every request whose path is /webhooks or under it, once
// cleaned as http.ServeMux cleans it, to the receiver, and the rest to
// next. A path that is not exactly /webhooks/NAME ("/webhooks//stripe",
// "/webhooks/stripe/") is answered 404 "bad_path", never redirected.
func (r *Receiver) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if underWebhooks(req.URL.Path) {
			r.ServeHTTP(w, req)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// underWebhooks reports whether p, cleaned, is /webhooks or under it.
func underWebhooks(p string) bool {
	under := func(p string) bool { return p == "/webhooks" || strings.HasPrefix(p, "/webhooks/") }
	return under(p) || under(path.Clean("/"+p))
}

// sourceName is the source a path names when the mux set no {source}: the
// one segment after /webhooks/ (or the whole path, under
// http.StripPrefix). ok is false for any other path: empty, a dot, a
// slash left in it.
func sourceName(u *url.URL) (name string, ok bool) {
	seg := strings.TrimPrefix(u.EscapedPath(), "/webhooks/")
	if seg == "" || seg == "." || seg == ".." || strings.Contains(seg, "/") {
		return "", false
	}
	name, err := url.PathUnescape(seg)
	return name, err == nil
}

// Drain makes every later delivery a 503 with Retry-After, so providers
// retry against another instance while this one shuts down. Nothing is
// acknowledged that is not committed, draining or not.
func (r *Receiver) Drain() { r.draining.Store(true) }

// Outcomes of a delivery: the "status" of the receiver's answer, and what
// ReceiveObserver is told.
const (
	OutcomeAccepted    = "accepted"
	OutcomeDuplicate   = "duplicate"
	OutcomeConflict    = "conflict"
	OutcomeReplay      = "replay"
	OutcomeRejected    = "rejected"
	OutcomeUnavailable = "unavailable"
)

// Reasons of a rejected or unavailable delivery: the "error" of the
// receiver's answer, its log line's reason and ReceiveObserver's. They are
// stable; alerts and scripts match on them. docs/operations.md says what
// each one asks of the sender or the operator.
const (
	ReasonMissingSignature   = "missing_signature"
	ReasonMalformedSignature = "malformed_signature"
	ReasonStaleTimestamp     = "stale_timestamp"
	ReasonBadSignature       = "bad_signature"
	ReasonMissingEventID     = "missing_event_id"
	ReasonBadPayload         = "bad_payload"
	ReasonBadEventID         = "bad_event_id"
	ReasonBadEventType       = "bad_event_type"
	ReasonUnknownSource      = "unknown_source"
	ReasonBadPath            = "bad_path"
	ReasonMethodNotAllowed   = "method_not_allowed"
	ReasonBodyTooLarge       = "body_too_large"
	ReasonUnreadableBody     = "unreadable_body"
	ReasonBodyTimeout        = "body_timeout"
	// The unavailable ones come with Retry-After.
	ReasonStoreUnavailable = "store_unavailable"
	ReasonStoreTimeout     = "store_timeout"
	ReasonDraining         = "draining"
	ReasonStarting         = "starting"
	ReasonMemoryBudget     = "memory_budget"
	ReasonClientGone       = "client_gone"
)

// answer is one row of the status table: every outcome the receiver can
// give, with its status and body.
type answer struct {
	status  int
	outcome string // one of the Outcome constants
	reason  string
	// detail says what to fix, for the sender and the log; never a label.
	detail string
}

var (
	answerAccepted  = answer{http.StatusOK, OutcomeAccepted, "", ""}
	answerDuplicate = answer{http.StatusOK, OutcomeDuplicate, "", ""}
	answerConflict  = answer{http.StatusOK, OutcomeConflict, "", ""}
	// answerReplay is a 2xx: the signature was valid, and any other answer
	// makes a real provider retry.
	answerReplay   = answer{http.StatusOK, OutcomeReplay, "", ""}
	answerNoSource = answer{http.StatusNotFound, OutcomeRejected, ReasonUnknownSource, ""}
	// answerBadPath is a path under /webhooks that is not /webhooks/NAME.
	// A provider follows no redirect, so it is answered, never redirected
	// to the clean path (as http.ServeMux would) nor accepted: the sender's
	// URL is wrong and will stay wrong until someone reads this.
	answerBadPath = answer{http.StatusNotFound, OutcomeRejected, ReasonBadPath,
		"a webhook URL is /webhooks/{source}: one name after /webhooks/, no trailing slash, no empty or dot segment"}
	answerMethod       = answer{http.StatusMethodNotAllowed, OutcomeRejected, ReasonMethodNotAllowed, ""}
	answerTooLarge     = answer{http.StatusRequestEntityTooLarge, OutcomeRejected, ReasonBodyTooLarge, ""}
	answerUnreadable   = answer{http.StatusBadRequest, OutcomeRejected, ReasonUnreadableBody, ""}
	answerBodyTimeout  = answer{http.StatusRequestTimeout, OutcomeRejected, ReasonBodyTimeout, ""}
	answerBadSignature = answer{http.StatusUnauthorized, OutcomeRejected, ReasonBadSignature, ""}
	answerNoEventID    = answer{http.StatusBadRequest, OutcomeRejected, ReasonMissingEventID, ""}
	answerBadEventID   = answer{http.StatusBadRequest, OutcomeRejected, ReasonBadEventID, ""}
	answerBadType      = answer{http.StatusBadRequest, OutcomeRejected, ReasonBadEventType, ""}
	answerUnavailable  = answer{http.StatusServiceUnavailable, OutcomeUnavailable, ReasonStoreUnavailable, ""}
	answerTimeout      = answer{http.StatusServiceUnavailable, OutcomeUnavailable, ReasonStoreTimeout, ""}
	answerDraining     = answer{http.StatusServiceUnavailable, OutcomeUnavailable, ReasonDraining, ""}
	answerStarting     = answer{http.StatusServiceUnavailable, OutcomeUnavailable, ReasonStarting, ""}
	answerBusy         = answer{http.StatusServiceUnavailable, OutcomeUnavailable, ReasonMemoryBudget, ""}
	// answerClientGone is for a sender that hung up while its receipt was
	// being stored: nobody reads the 503, and the reason keeps the sender's
	// own timeout from being counted as a store failure.
	answerClientGone = answer{http.StatusServiceUnavailable, OutcomeUnavailable, ReasonClientGone, ""}
)

// verifyAnswers maps each verification error to its answer; anything else a
// Verifier returns is a bad signature.
var verifyAnswers = []struct {
	err error
	answer
}{
	{ferry.ErrNoSignature, answer{http.StatusUnauthorized, OutcomeRejected, ReasonMissingSignature, ""}},
	{ferry.ErrMalformedSignature, answer{http.StatusUnauthorized, OutcomeRejected, ReasonMalformedSignature, ""}},
	{ferry.ErrStaleTimestamp, answer{http.StatusUnauthorized, OutcomeRejected, ReasonStaleTimestamp, ""}},
	{ferry.ErrBadSignature, answerBadSignature},
	{ferry.ErrNoEventID, answerNoEventID},
	{ferry.ErrBadPayload, answer{http.StatusBadRequest, OutcomeRejected, ReasonBadPayload, ""}},
	{ferry.ErrBadEventID, answerBadEventID},
	{ferry.ErrBadEventType, answerBadType},
}

// verifyAnswer is err's answer, with the detail of a ferry.VerifyError,
// which holds no secret, signature, header value or payload byte (its
// contract). An error of another type gets none: nothing says what its
// text holds.
func verifyAnswer(err error) answer {
	a := answerBadSignature
	for _, va := range verifyAnswers {
		if errors.Is(err, va.err) {
			a = va.answer
			break
		}
	}
	if ve, ok := errors.AsType[*ferry.VerifyError](err); ok {
		a.detail = ve.Detail
	}
	return a
}

// ServeHTTP answers one delivery, as the Receiver doc says, for the source
// named by the {source} path value, or by the path's one segment after
// /webhooks/ when there is none (Handler, or mounted without Register);
// any other path is answered 404 "bad_path". It logs one line per delivery
// and reports it to ReceiverOptions.Observer, if set.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	name, named := req.PathValue("source"), true
	if name == "" {
		name, named = sourceName(req.URL)
	}
	req, span := r.startReceipt(req, name)
	var stored ferry.EventReceiveResult
	a, eventID, storeErr := answerBadPath, "", error(nil)
	if named {
		a, eventID, storeErr = r.receive(w, req, name, &stored)
	}
	r.reply(w, a)
	endReceipt(span, a, eventID)

	latency := time.Since(start)
	r.log(req.Context(), name, eventID, a, &stored, latency, storeErr)
	if r.opts.Observer != nil {
		r.opts.Observer.ObserveReceive(name, a.outcome, a.reason, latency)
	}
}

// log writes the delivery's line, building it only if the logger keeps it.
// stored is what the store answered, zero if it was not asked: a conflict
// or replay it counted without keeping (CountedOnly) raises no alert.
func (r *Receiver) log(ctx context.Context, name, eventID string, a answer, stored *ferry.EventReceiveResult, latency time.Duration, storeErr error) {
	level := slog.LevelInfo
	countedOnly := stored.CountedOnly
	alert := (a.outcome == OutcomeConflict || a.outcome == OutcomeReplay) && !countedOnly
	if alert || a.outcome == OutcomeUnavailable {
		level = slog.LevelWarn
	}
	if !r.opts.Logger.Enabled(ctx, level) {
		return
	}
	if a == answerNoSource || a == answerBadPath {
		name = "" // a name a sender made up, of any length: never a log line's
	}
	attrs := []slog.Attr{
		slog.String("source", name), slog.String("event_id", eventID), slog.String("outcome", a.outcome),
		slog.Int("status", a.status), slog.Duration("latency", latency),
	}
	if a.reason != "" {
		attrs = append(attrs, slog.String("reason", a.reason))
	}
	if a.detail != "" {
		attrs = append(attrs, slog.String("detail", a.detail))
	}
	switch {
	case countedOnly:
		// Counted on its event, which keeps ferry.NoticeKeep already (or
		// this conflicting payload): alerted before, not again.
		attrs = append(attrs, slog.Bool("kept", false))
	case alert && a.outcome == OutcomeConflict:
		attrs = append(attrs, slog.String("alert", "conflicting_duplicate"))
	case alert:
		// The event id logged is the one the delivery claimed, never
		// stored; stored_id is the row of the stored event whose body it
		// carried, which lists it (the dashboard's /ui/events/N, events show).
		attrs = append(attrs, slog.String("alert", "suspected_replay"), slog.Int64("stored_id", stored.ID))
	}
	if storeErr != nil {
		// Ferry's stores' errors name the operation and the database's
		// complaint, never the payload they were binding, so an operator
		// learns why without the log learning the body.
		attrs = append(attrs, slog.String("err", storeErr.Error()))
	}
	r.opts.Logger.LogAttrs(ctx, level, "ferry: webhook", attrs...)
}

// receive runs the checks in order and stores the delivery. It returns the
// answer, the event id once verified, and the store's error when it failed;
// *stored is set to the store's result.
func (r *Receiver) receive(w http.ResponseWriter, req *http.Request, name string, stored *ferry.EventReceiveResult) (answer, string, error) {
	src, ok := r.sources[name]
	if !ok {
		return answerNoSource, "", nil
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return answerMethod, "", nil
	}
	if r.draining.Load() {
		return answerDraining, "", nil
	}
	// Refused before the body is read: closing the connection is what
	// keeps net/http from reading (up to 256 KiB of) it before it answers.
	if req.ContentLength > src.MaxBodyBytes {
		w.Header().Set("Connection", "close")
		return answerTooLarge, "", nil
	}
	if req.ContentLength > 0 && !r.fits(req.ContentLength) {
		w.Header().Set("Connection", "close")
		return answerBusy, "", nil
	}
	var held int64
	defer func() { r.inFlight.Add(-held) }()
	body, err := r.readBody(w, http.MaxBytesReader(w, req.Body, src.MaxBodyBytes), req.ContentLength, &held)
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			return answerTooLarge, "", nil
		}
		// The rest of the body stays unread: without a close, net/http
		// would wait for it before answering.
		switch {
		case errors.Is(err, errBudget):
			w.Header().Set("Connection", "close")
			return answerBusy, "", nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			return answerBodyTimeout, "", nil
		}
		return answerUnreadable, "", nil
	}
	v, err := src.Verifier.Verify(req.Header, body)
	if err != nil {
		return verifyAnswer(err), "", nil
	}
	if r.secrets != nil && v != nil {
		r.secrets.ObserveSecret(name, v.Secret)
	}
	if a, ok := checkIdentity(v); !ok {
		return a, "", nil // the id may be what made it unstorable: not logged
	}
	r.receiptPhase(req.Context(), "verified", ferry.AttrEventType.String(v.Type))
	traceparent, tracestate := r.receiptTraceContext(req.Context())

	ctx, cancel := context.WithTimeout(req.Context(), r.opts.StoreTimeout)
	defer cancel()
	res, err := r.receipts.Do(ctx, &ferry.EventReceiveParams{
		Source: name, EventID: v.EventID, Type: v.Type, Payload: body, Headers: r.keptHeaders(req.Header, src.keep),
		ReplayWindow: src.ReplayWindow,
		Traceparent:  traceparent, Tracestate: tracestate,
	})
	if err != nil {
		// store_timeout only when our StoreTimeout ran out, client_gone when
		// the sender hung up before its receipt was written, and
		// store_unavailable when the store failed on its own. The clock
		// decides as well as ctx: the batch our receipt went in may time out
		// a moment before ctx's own timer fires.
		switch deadline, _ := ctx.Deadline(); {
		case errors.Is(ctx.Err(), context.DeadlineExceeded) || !time.Now().Before(deadline):
			return answerTimeout, v.EventID, err
		case errors.Is(err, context.Canceled) && req.Context().Err() != nil:
			return answerClientGone, v.EventID, err
		}
		return answerUnavailable, v.EventID, err
	}
	r.receiptPhase(req.Context(), "stored")
	*stored = *res
	switch res.Outcome {
	case ferry.ReceiveDuplicate:
		return answerDuplicate, v.EventID, nil
	case ferry.ReceiveConflict:
		return answerConflict, v.EventID, nil
	case ferry.ReceiveReplay:
		return answerReplay, v.EventID, nil
	}
	return answerAccepted, v.EventID, nil
}

// checkIdentity refuses, as 400s, an event id or type that no store can keep
// the same way (ferry.ValidateEventID): a provider retries a 5xx for days,
// while the delivery can never be stored.
func checkIdentity(v *ferry.Verified) (answer, bool) {
	switch {
	case v == nil || v.EventID == "":
		return answerNoEventID, false
	case ferry.ValidateEventID(v.EventID) != nil:
		return answerBadEventID, false
	case ferry.ValidateEventType(v.Type) != nil:
		return answerBadType, false
	}
	return answer{}, true
}

// keptHeaders are the headers of h that keep names (the source's
// KeepHeaders), in their order, within KeptHeaderValueMax and
// KeptHeadersMax; but Content-Type, which the forwarder sends the app, is
// kept first and whole, if it is kept at all (a multipart boundary may
// pass KeptHeaderValueMax), within KeptHeadersMax; one longer is dropped.
func (r *Receiver) keptHeaders(h http.Header, keep []string) http.Header {
	out := http.Header{}
	budget := KeptHeadersMax
	var dropped []string
	const contentType = "Content-Type"
	if v := h.Get(contentType); v != "" && r.keepType {
		if len(contentType)+len(v) > KeptHeadersMax {
			dropped = append(dropped, contentType)
		} else {
			out[contentType] = []string{v}
			budget -= len(contentType) + len(v)
		}
	}
	for _, k := range keep {
		for _, v := range h.Values(k) {
			v = cutHeaderValue(v)
			if len(k)+len(v) > budget {
				if !slices.Contains(dropped, k) {
					dropped = append(dropped, k)
				}
				continue
			}
			budget -= len(k) + len(v)
			out[k] = append(out[k], v)
		}
	}
	if len(dropped) > 0 {
		out[droppedHeader] = []string{strings.Join(dropped, ", ")}
	}
	return out
}

// cutHeaderValue cuts v to KeptHeaderValueMax bytes, the mark of the cut
// included, on a character boundary.
func cutHeaderValue(v string) string {
	if len(v) <= KeptHeaderValueMax {
		return v
	}
	mark := " [cut by ferry from " + strconv.Itoa(len(v)) + " bytes]"
	cut := KeptHeaderValueMax - len(mark)
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + mark
}

func (r *Receiver) reply(w http.ResponseWriter, a answer) { writeAnswer(w, a, r.opts.RetryAfter) }

// writeAnswer writes a as the receiver answers a delivery: JSON, and on a
// 503 a Retry-After of retryAfter in whole seconds, rounded up.
func writeAnswer(w http.ResponseWriter, a answer, retryAfter time.Duration) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if a.status == http.StatusServiceUnavailable {
		secs := (retryAfter + time.Second - 1) / time.Second
		w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body())
}

// body is the JSON answer, as json.Encoder would write it (keys sorted, a
// final newline) without building a map and an encoder per request.
// Outcomes and reasons are fixed lowercase words: nothing to escape; a
// detail is quoted by encoding/json.
func (a answer) body() string {
	if a.reason == "" {
		return `{"status":"` + a.outcome + `"}` + "\n"
	}
	detail := ""
	if a.detail != "" {
		quoted, _ := json.Marshal(a.detail) // a string always marshals
		detail = `"detail":` + string(quoted) + `,`
	}
	return `{` + detail + `"error":"` + a.reason + `","status":"` + a.outcome + `"}` + "\n"
}

func cmpOrSlice[T any](v, def []T) []T {
	if len(v) == 0 {
		return def
	}
	return v
}

// receiveMany stores one batch of deliveries with one commit; each caller
// gets its own result. A batch that fails as a whole fails every delivery of
// it: none is acknowledged.
func (r *Receiver) receiveMany(ctx context.Context, receipts []*ferry.EventReceiveParams) []groupcommit.Result[*ferry.EventReceiveResult] {
	out := make([]groupcommit.Result[*ferry.EventReceiveResult], len(receipts))
	results, err := r.opts.Store.EventReceiveMany(ctx, &ferry.EventReceiveManyParams{Receipts: receipts})
	for i := range out {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i] = groupcommit.Result[*ferry.EventReceiveResult]{Value: results[i].Result, Err: results[i].Err}
	}
	return out
}

package ferryhttp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ferry-inbox/ferry"
)

// DefaultSessionTTL is how long a dashboard login lasts unless
// AdminOptions.SessionTTL says otherwise.
const DefaultSessionTTL = 12 * time.Hour

// DefaultTokenName is AdminOptions.TokenName's default: the actor the
// ledger names for what is done with the token.
const DefaultTokenName = "token"

// AnonymousActor is the actor of requests to an Admin without credentials:
// anyone who can reach its (loopback) listener.
const AnonymousActor = "anonymous"

// AdminOptions configure an Admin.
type AdminOptions struct {
	// Dashboard is served at /ui/. Optional.
	Dashboard *Dashboard
	// Metrics is served at /metrics (Prometheus scrapes it with the same
	// credentials). Optional.
	Metrics http.Handler
	// Token, if set, is accepted as "Authorization: Bearer TOKEN" and on
	// the login form.
	Token string
	// TokenName is the actor of what is done with Token. Defaults to
	// DefaultTokenName.
	TokenName string
	// User and Password, if set, are accepted as HTTP basic auth and on the
	// login form; User is the actor.
	User, Password string
	// PublicURL is the URL operators' browsers open this listener at, if a
	// proxy stands in front of it. https makes the session cookie Secure;
	// its origin is trusted for POSTs. Optional.
	PublicURL string
	// SessionTTL is how long a login lasts. Defaults to DefaultSessionTTL.
	SessionTTL time.Duration
	// Now is the session clock. Defaults to time.Now.
	Now func() time.Time
	// Logger gets logins, logouts and refused credentials, never a credential.
	// Defaults to slog.Default().
	Logger *slog.Logger
}

// Admin is the handler of the operators' listener: the dashboard, its
// actions and /metrics, on an address of their own (never the public
// receiver's). Access depends only on a credential: a bearer token, basic
// auth, or a session cookie the login form issues. Nothing in a request's
// Host, X-Forwarded-* or peer address grants access.
//
// Without Token or User the Admin lets every request in as AnonymousActor:
// serve it only on loopback, and behind no proxy (the ferry binary refuses
// a non-loopback listener or public_url at start). Then it answers only
// requests addressed to an IP literal or localhost and carrying no header a
// proxy or CDN adds (Forwarded, X-Forwarded-*, Via, X-Real-Ip,
// True-Client-Ip, Cf-Connecting-Ip and the like), so a web page on a
// DNS name rebound to 127.0.0.1, or a proxy, cannot read it; those checks
// only ever refuse.
//
// Sessions are signed (HMAC-SHA256 under a key drawn at start, so a restart
// signs everyone out), expire after SessionTTL, and end at once on logout.
// Every POST is checked against cross-origin requests (CSRF) by
// http.CrossOriginProtection, and its body is read up to adminBodyLimit:
// the login form reads one before any credential is known.
//
// Wrong credentials (the login form, a bearer token, basic auth) are
// logged at once, then at most once a minute with how many were refused
// since the last such line.
type Admin struct {
	opts    AdminOptions
	key     []byte
	pages   *template.Template
	handler http.Handler
	// secureCookie is whether PublicURL is https.
	secureCookie bool

	mu            sync.Mutex
	revoked       map[string]time.Time // session id → expiry, for logouts
	refusals      int                  // wrong credentials not logged yet
	refusalTimer  *time.Timer          // set while a window is open: its end logs refusals
	refusalWindow time.Duration
	lastRefused   refusal
}

// refusal is where a refused credential came from, for the log; never
// what was sent.
type refusal struct{ peer, path string }

// adminBodyLimit bounds what an admin request's body may hold: its forms
// carry a few fields.
const adminBodyLimit = 64 << 10

// NewAdmin checks opts and builds the handler. What it refuses in opts is
// an error wrapping ferry.ErrInvalidParams.
func NewAdmin(opts AdminOptions) (*Admin, error) {
	if (opts.User == "") != (opts.Password == "") {
		return nil, fmt.Errorf("%w: ferryhttp: admin basic auth needs both User and Password", ferry.ErrInvalidParams)
	}
	if opts.TokenName == "" {
		opts.TokenName = DefaultTokenName
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	a := &Admin{opts: opts, key: make([]byte, 32), revoked: map[string]time.Time{}, refusalWindow: time.Minute}
	if _, err := rand.Read(a.key); err != nil {
		return nil, err
	}
	var err error
	if a.pages, err = parsePages(); err != nil {
		return nil, err
	}
	cop := http.NewCrossOriginProtection()
	if opts.PublicURL != "" {
		u, err := url.Parse(opts.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: ferryhttp: AdminOptions.PublicURL %q is not an http(s) URL", ferry.ErrInvalidParams, opts.PublicURL)
		}
		// Browsers send the origin's host in lower case.
		if err := cop.AddTrustedOrigin(u.Scheme + "://" + strings.ToLower(u.Host)); err != nil {
			return nil, fmt.Errorf("%w: ferryhttp: AdminOptions.PublicURL: %w", ferry.ErrInvalidParams, err)
		}
		a.secureCookie = u.Scheme == "https" // url.Parse lowers the scheme
	}
	mux := http.NewServeMux()
	if opts.Dashboard != nil {
		mux.Handle("/ui/", opts.Dashboard.routes) // behind cop below, which trusts PublicURL
		mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
		mux.HandleFunc("GET /ui/login", a.login)
		mux.HandleFunc("POST /ui/login", a.login)
		mux.HandleFunc("POST /ui/logout", a.logout)
	}
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	a.handler = cop.Handler(a.guard(mux))
	return a, nil
}

// ServeHTTP sets the security headers (Content-Security-Policy, no-store),
// bounds the body to 64 KiB, and lets the request through to the
// dashboard or /metrics only as the Admin doc says.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	r.Body = http.MaxBytesReader(w, r.Body, adminBodyLimit)
	a.handler.ServeHTTP(w, r)
}

func (a *Admin) hasAuth() bool { return a.opts.Token != "" || a.opts.User != "" }

// principal is who a request acts as, and whether through a session.
type principal struct {
	actor   string
	session *session
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalOf(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p, ok
}

// guard lets a request through with the principal its credential names.
func (a *Admin) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.hasAuth() {
			if !a.addressedDirectly(r) {
				http.Error(w, "without credentials the admin listener answers only to an IP address or localhost: set admin.token to reach it by another name", http.StatusForbidden)
				return
			}
			if h := relayHeader(r); h != "" {
				http.Error(w, "without credentials the admin listener answers no request a proxy relayed ("+h+" is set): set admin.token to serve it behind a proxy", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), principal{actor: AnonymousActor})))
			return
		}
		if strings.HasPrefix(r.URL.Path, "/ui/static/") || r.URL.Path == "/ui/login" {
			next.ServeHTTP(w, r)
			return
		}
		if p, ok := a.authenticate(r); ok {
			next.ServeHTTP(w, r.WithContext(withPrincipal(r.Context(), p)))
			return
		}
		if r.Header.Get("Authorization") != "" {
			a.refused(r)
		}
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) && a.opts.Dashboard != nil {
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		if a.opts.User != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="ferry admin", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ferry admin"`)
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}

// addressedDirectly reports whether the request names this listener by an
// IP literal or localhost: a DNS name an attacker controls (DNS rebinding)
// is neither. It only refuses; it never grants access.
func (a *Admin) addressedDirectly(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	return net.ParseIP(host) != nil || host == "localhost"
}

// relayHeader names a header r carries that proxies and CDNs add to what
// they relay (Forwarded, X-Forwarded-*, Via, or one of clientIPHeaders), or
// "". Like
// addressedDirectly it only refuses, and catches only a proxy configured
// to add one: nginx's plain proxy_pass adds none and sends the upstream's
// loopback Host, so an admin behind a proxy needs credentials.
func relayHeader(r *http.Request) string {
	for h := range r.Header {
		switch {
		case h == "Forwarded", h == "Via", strings.HasPrefix(h, "X-Forwarded-"), slices.Contains(clientIPHeaders, h):
			return h
		}
	}
	return ""
}

// clientIPHeaders are the headers, in canonical form, in which proxies and
// CDNs (nginx, Cloudflare, Akamai, Fastly) pass on the address they were
// reached from.
var clientIPHeaders = []string{"X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Cluster-Client-Ip"}

// authenticate checks, in order, a bearer token, basic auth and the
// session cookie.
func (a *Admin) authenticate(r *http.Request) (principal, bool) {
	if a.opts.Token != "" {
		// The scheme's name is case-insensitive (RFC 9110 11.1), as
		// Request.BasicAuth reads "Basic".
		if scheme, bearer, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && equal(bearer, a.opts.Token) {
			return principal{actor: a.opts.TokenName}, true
		}
	}
	if a.opts.User != "" {
		if u, p, ok := r.BasicAuth(); ok && equal(u, a.opts.User) && equal(p, a.opts.Password) {
			return principal{actor: a.opts.User}, true
		}
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if s, ok := a.verify(c.Value); ok {
			return principal{actor: s.actor, session: s}, true
		}
	}
	return principal{}, false
}

// equal compares in constant time, whatever the lengths.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

const sessionCookie = "ferry_session"

// session is what the cookie carries: who, until when, and an id a logout
// revokes. Never a credential.
type session struct {
	actor   string
	expires time.Time
	id      string
}

func (a *Admin) sign(actor string, expires time.Time, id string) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(actor)) + "." + strconv.FormatInt(expires.Unix(), 10) + "." + id
	mac := hmac.New(sha256.New, a.key)
	mac.Write([]byte("ferry-session-v1." + payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (a *Admin) verify(value string) (*session, bool) {
	parts := strings.Split(value, ".")
	if len(parts) != 4 {
		return nil, false
	}
	actor, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, false
	}
	unix, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return nil, false
	}
	s := &session{actor: string(actor), expires: time.Unix(unix, 0), id: parts[2]}
	if !hmac.Equal([]byte(a.sign(s.actor, s.expires, s.id)), []byte(value)) {
		return nil, false
	}
	if !a.opts.Now().Before(s.expires) {
		return nil, false
	}
	a.mu.Lock()
	_, revoked := a.revoked[s.id]
	a.mu.Unlock()
	if revoked {
		return nil, false
	}
	// The actor must still be one the configuration knows.
	if !(a.opts.Token != "" && s.actor == a.opts.TokenName) && !(a.opts.User != "" && s.actor == a.opts.User) {
		return nil, false
	}
	return s, true
}

type loginData struct {
	chrome
	Error        string
	Token, Basic bool
}

func (a *Admin) login(w http.ResponseWriter, r *http.Request) {
	if !a.hasAuth() {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	data := loginData{chrome: chrome{Title: "Sign in"}, Token: a.opts.Token != "", Basic: a.opts.User != ""}
	if r.Method == http.MethodPost {
		if err := r.ParseForm(); err != nil {
			status := http.StatusBadRequest
			if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
				status = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "the login form could not be read: "+err.Error(), status)
			return
		}
		actor := ""
		switch {
		case a.opts.Token != "" && r.PostFormValue("token") != "" && equal(r.PostFormValue("token"), a.opts.Token):
			actor = a.opts.TokenName
		case a.opts.User != "" && r.PostFormValue("user") != "" && equal(r.PostFormValue("user"), a.opts.User) && equal(r.PostFormValue("password"), a.opts.Password):
			actor = a.opts.User
		}
		if actor != "" {
			id := make([]byte, 16)
			if _, err := rand.Read(id); err != nil {
				http.Error(w, "no randomness for a session", http.StatusInternalServerError)
				return
			}
			expires := a.opts.Now().Add(a.opts.SessionTTL)
			http.SetCookie(w, &http.Cookie{
				Name: sessionCookie, Value: a.sign(actor, expires, hex.EncodeToString(id)), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: a.secureCookie,
				MaxAge: int(a.opts.SessionTTL / time.Second),
			})
			a.opts.Logger.Info("ferry: admin login", "actor", actor)
			http.Redirect(w, r, "/ui/", http.StatusSeeOther)
			return
		}
		a.refused(r)
		w.WriteHeader(http.StatusUnauthorized)
		data.Error = "wrong credentials"
	}
	renderPage(w, a.pages, a.opts.Logger, "login.html", &data)
}

func (a *Admin) logout(w http.ResponseWriter, r *http.Request) {
	if p, ok := principalOf(r.Context()); ok && p.session != nil {
		a.mu.Lock()
		now := a.opts.Now()
		for id, exp := range a.revoked {
			if !now.Before(exp) {
				delete(a.revoked, id)
			}
		}
		a.revoked[p.session.id] = p.session.expires
		a.mu.Unlock()
		a.opts.Logger.Info("ferry: admin logout", "actor", p.actor)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: a.secureCookie, MaxAge: -1})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// refused counts a wrong credential, never what was sent. The first of a
// quiet spell is logged at once and opens a window of refusalWindow; the
// window's end logs those refused within it, if any, and opens the next.
// Someone guessing shows, however briefly, without flooding the log.
func (a *Admin) refused(r *http.Request) {
	a.mu.Lock()
	a.refusals++
	a.lastRefused = refusal{peer: r.RemoteAddr, path: r.URL.Path}
	n, last := 0, a.lastRefused
	if a.refusalTimer == nil {
		n, a.refusals = a.refusals, 0
		a.refusalTimer = time.AfterFunc(a.refusalWindow, a.refusalWindowEnd)
	}
	a.mu.Unlock()
	a.logRefusals(n, last)
}

func (a *Admin) refusalWindowEnd() {
	a.mu.Lock()
	n, last := a.refusals, a.lastRefused
	a.refusals, a.refusalTimer = 0, nil
	if n > 0 {
		a.refusalTimer = time.AfterFunc(a.refusalWindow, a.refusalWindowEnd)
	}
	a.mu.Unlock()
	a.logRefusals(n, last)
}

// logRefusals logs n refusals with where the last came from: the peer
// address (a proxy's, behind one) and the path, to find the client by.
func (a *Admin) logRefusals(n int, last refusal) {
	if n > 0 {
		a.opts.Logger.Warn("ferry: admin credentials refused", "peer", last.peer, "path", last.path, "refused", n)
	}
}

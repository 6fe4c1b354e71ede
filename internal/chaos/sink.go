//go:build unix

package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// effect is one request the sink answered: the app's view of a side effect.
type effect struct {
	key     string // Idempotency-Key
	source  string
	eventID string
	attempt int
	sha     string // SHA-256 of the body, hex
	status  int
	at      time.Time
}

// sink is the app every source forwards to. It records each request and
// answers 200, or what fail says.
type sink struct {
	srv *http.Server
	ln  net.Listener
	url string

	mu      sync.Mutex
	records []effect
	fail    func(key string) int // a non-zero status to answer instead of 200
	delay   func(key string) time.Duration
}

func newSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, url: "http://" + ln.Addr().String() + "/effects"}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(body)
	attempt, _ := strconv.Atoi(r.Header.Get("Ferry-Attempt"))
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	delay := s.delay
	s.mu.Unlock()
	if delay != nil {
		select {
		case <-r.Context().Done():
		case <-time.After(delay(key)):
		}
	}
	s.mu.Lock()
	status := http.StatusOK
	if s.fail != nil {
		if st := s.fail(key); st != 0 {
			status = st
		}
	}
	s.records = append(s.records, effect{
		key: key, source: r.Header.Get("Ferry-Source"), eventID: r.Header.Get("Ferry-Event-Id"),
		attempt: attempt, sha: hex.EncodeToString(sum[:]), status: status, at: time.Now(),
	})
	s.mu.Unlock()
	w.WriteHeader(status)
}

func (s *sink) setFail(f func(key string) int) {
	s.mu.Lock()
	s.fail = f
	s.mu.Unlock()
}

// setDelay makes the sink answer each request d(key) late; nil answers at
// once.
func (s *sink) setDelay(d func(key string) time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

func (s *sink) snapshot() []effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]effect(nil), s.records...)
}

func (s *sink) close() { _ = s.srv.Close() }

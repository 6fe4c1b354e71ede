package ferryhttp

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// errBudget is readBody's when a body's next bytes do not fit beside what
// other requests hold.
var errBudget = errors.New("ferryhttp: in-flight byte budget spent")

// bodyReadSize is how much readBody takes from the connection before it
// grows its buffer for it.
const bodyReadSize = 512

// InFlightBytes is the body bytes the receiver holds now: arrived, and not
// yet stored or refused. MaxInFlightBytes bounds it (a lone body may pass
// it); near the bound, deliveries are answered 503 "memory_budget".
func (r *Receiver) InFlightBytes() int64 { return r.inFlight.Load() }

// fits reports whether size more bytes would fit in the in-flight budget
// now. It reserves nothing: it refuses at once a body that would be refused
// part-way.
func (r *Receiver) fits(size int64) bool {
	cur := r.inFlight.Load()
	return cur == 0 || cur+size <= r.opts.MaxInFlightBytes
}

// reserve adds more bytes to a request's share of the in-flight budget,
// which is held already, or reports that they do not fit. A request that
// alone holds the budget may always grow, so a body larger than the whole
// budget is slow, never refused for ever.
func (r *Receiver) reserve(held, more int64) bool {
	for {
		cur := r.inFlight.Load()
		if cur > held && cur+more > r.opts.MaxInFlightBytes {
			return false
		}
		if r.inFlight.CompareAndSwap(cur, cur+more) {
			return true
		}
	}
}

// readBody reads body, length bytes when the request names them or else to
// its end, within BodyTimeout. Its buffer grows as bytes arrive (doubling,
// and never past length), each growth reserved in *held first: a request
// holds what it has sent, at most twice that, never what it claims. It
// returns errBudget when a growth does not fit, and the read's error
// (os.ErrDeadlineExceeded past BodyTimeout) when the body does not come.
func (r *Receiver) readBody(w http.ResponseWriter, body io.Reader, length int64, held *int64) ([]byte, error) {
	// net/http lifts the deadline once the body has been read to its end,
	// so it never cuts the wait for the store. Not supported (a
	// ResponseWriter that is no connection's): the server's own deadlines
	// still apply.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(r.opts.BodyTimeout))

	var (
		buf  []byte
		next [bodyReadSize]byte // what arrived before buf grows for it
	)
	for {
		var (
			n   int
			err error
		)
		if len(buf) < cap(buf) {
			n, err = body.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
		} else if n, err = body.Read(next[:]); n > 0 {
			size := max(len(buf)+n, 2*cap(buf))
			if length >= 0 {
				size = min(size, int(length))
			}
			more := int64(size - cap(buf))
			if !r.reserve(*held, more) {
				return nil, errBudget
			}
			*held += more
			grown := make([]byte, len(buf), size)
			copy(grown, buf)
			buf = append(grown, next[:n]...)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

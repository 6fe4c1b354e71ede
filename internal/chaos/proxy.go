//go:build unix

package chaos

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy modes.
const (
	proxyPass      = iota // forward bytes as they come
	proxySlow             // delay every chunk
	proxyBlackhole        // forward nothing; connections stay open, silent
)

// proxy is a TCP fault injector between Ferry and PostgreSQL: it passes
// bytes, delays them, swallows them (black hole) or resets every open
// connection, on command.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  int
	delay time.Duration
	conns map[net.Conn]struct{}
	wake  chan struct{} // closed when the mode changes, so paused copies look again
	wg    sync.WaitGroup

	resets int
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, wake: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst chunk by chunk, obeying the mode before each write.
func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.drop(dst)
	defer p.drop(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.await() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// await blocks while the proxy black-holes and sleeps while it is slow. It
// returns false once the connection was reset meanwhile.
func (p *proxy) await() bool {
	for {
		p.mu.Lock()
		mode, delay, wake := p.mode, p.delay, p.wake
		p.mu.Unlock()
		switch mode {
		case proxyBlackhole:
			<-wake
			continue
		case proxySlow:
			time.Sleep(delay)
		}
		return true
	}
}

func (p *proxy) drop(c net.Conn) {
	p.mu.Lock()
	_, open := p.conns[c]
	delete(p.conns, c)
	p.mu.Unlock()
	if open {
		c.Close()
	}
}

func (p *proxy) setMode(mode int, delay time.Duration) {
	p.mu.Lock()
	p.mode, p.delay = mode, delay
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

// reset closes every open connection with a TCP RST (linger 0), as a
// crashed middlebox or a dropped NAT entry would.
func (p *proxy) reset() int {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.conns = map[net.Conn]struct{}{}
	p.resets++
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
	return len(conns) / 2
}

func (p *proxy) close() {
	p.ln.Close()
	p.setMode(proxyPass, 0)
	p.reset()
	p.wg.Wait()
}

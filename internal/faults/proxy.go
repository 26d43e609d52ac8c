package faults

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Direction is one way of a proxied connection.
type Direction int

const (
	// Requests flow from the client to the server.
	Requests Direction = iota
	// Replies flow from the server to the client.
	Replies
)

// Proxy is a TCP proxy on a loopback port that forwards every connection to
// one target and can hold, delay and cut the traffic, to play a bad network
// between a client and Redis:
//
//   - Pause holds the bytes of one or both directions (a request that is
//     never delivered, or a reply that never comes back) until Resume;
//   - SetDelay delays every chunk of one or both directions;
//   - Cut closes every open connection at once, dropping the bytes it held,
//     as a reset would; SetRefuse closes new connections as they come.
//
// Bytes held when their connection is closed by either side are dropped, never
// delivered later. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	links  map[*link]struct{}
	gates  [2]chan struct{} // per Direction: nil when open, closed on Resume
	delays [2]time.Duration
	refuse bool
	closed bool

	wg sync.WaitGroup // the accept loop and every link's goroutines
}

// NewProxy listens on a free loopback port and forwards every connection to
// target. Close it to stop it.
func NewProxy(target string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Pause holds the bytes of the given directions, of both when none is given,
// on every connection, present and future, until Resume.
func (p *Proxy) Pause(dirs ...Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range directions(dirs) {
		if p.gates[d] == nil {
			p.gates[d] = make(chan struct{})
		}
	}
}

// Resume forwards the held bytes and lets traffic flow again in every
// direction.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for d, g := range p.gates {
		if g != nil {
			close(g)
			p.gates[d] = nil
		}
	}
}

// SetDelay delays every chunk of the given directions (of both when none is
// given) by d before it is forwarded; 0 removes the delay.
func (p *Proxy) SetDelay(d time.Duration, dirs ...Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, dir := range directions(dirs) {
		p.delays[dir] = d
	}
}

// SetRefuse makes the proxy close every new connection at once (refuse true)
// or forward them again (false).
func (p *Proxy) SetRefuse(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
}

// Cut closes every open connection, dropping the bytes held for them, and
// waits until their goroutines are done. It returns how many it closed.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	for _, l := range links {
		l.wg.Wait()
	}
	return len(links)
}

// Conns returns the number of open connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening, cuts every connection and waits for every goroutine
// of the proxy.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Resume()
	p.Cut()
	p.wg.Wait()
	return err
}

func directions(dirs []Direction) []Direction {
	if len(dirs) == 0 {
		return []Direction{Requests, Replies}
	}
	return dirs
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			_ = client.Close()
			continue
		}
		d := net.Dialer{Timeout: 2 * time.Second}
		server, err := d.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		l := &link{p: p, client: client, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		l.start()
	}
}

// gate returns the channel to wait on before forwarding in direction d (nil
// when it is open) and the delay to apply.
func (p *Proxy) gate(d Direction) (chan struct{}, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gates[d], p.delays[d]
}

// link is one proxied connection: per direction, a reader that takes chunks
// off one socket and a writer that forwards them to the other once the gate
// is open and the delay has passed. Whatever ends one goroutine closes the
// whole link.
type link struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
	wg             sync.WaitGroup
}

func (l *link) start() {
	l.wg.Add(4)
	up := make(chan []byte, 64)
	down := make(chan []byte, 64)
	go l.read(l.client, up)
	go l.write(Requests, up, l.server)
	go l.read(l.server, down)
	go l.write(Replies, down, l.client)
	go func() {
		l.wg.Wait()
		l.p.wg.Done()
	}()
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

func (l *link) read(from net.Conn, to chan<- []byte) {
	defer l.wg.Done()
	defer l.close()
	for {
		buf := make([]byte, 32<<10)
		n, err := from.Read(buf)
		if n > 0 {
			select {
			case to <- buf[:n]:
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *link) write(d Direction, from <-chan []byte, to net.Conn) {
	defer l.wg.Done()
	defer l.close()
	for {
		var chunk []byte
		select {
		case chunk = <-from:
		case <-l.done:
			return
		}
		if !l.pass(d) {
			return
		}
		if _, err := to.Write(chunk); err != nil {
			return
		}
	}
}

// pass waits until direction d is open and its delay has passed; false when
// the link closed meanwhile.
func (l *link) pass(d Direction) bool {
	for {
		gate, delay := l.p.gate(d)
		if gate == nil {
			if delay > 0 {
				t := time.NewTimer(delay)
				select {
				case <-t.C:
				case <-l.done:
					t.Stop()
					return false
				}
				// The link may have been paused during the delay.
				if g, _ := l.p.gate(d); g != nil {
					continue
				}
			}
			return true
		}
		select {
		case <-gate:
		case <-l.done:
			return false
		}
	}
}

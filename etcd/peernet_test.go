package etcd_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// peerNet is the network between the fault test's members: a proxy before
// each member's peer port, through which its peers reach it. It can cut the
// traffic from one member to another, one way at a time, so that a member
// can be cut off in both directions (partition) or in one (cutFrom) while
// its client port stays up.
//
// etcd's peers talk HTTP: member a reaches member b through b's proxy, both
// to post messages (a to b, on the request side) and to open the streams on
// which b sends to a (on the reply side); every request carries the
// sender's member ID in X-Server-From. So a connection into b's proxy is
// from the member its first request names, and its request side carries a's
// traffic to b, its reply side b's to a. What a cut way carries is read and
// dropped, as a network that loses packets would; heal closes the
// connections that lost bytes (their HTTP is broken), and the members dial
// again. Requests without X-Server-From (etcd's probes of its peers' health,
// its version checks) are never cut.
type peerNet struct {
	mu      sync.Mutex
	ids     []string        // member IDs in hex (X-Server-From), by index; set once known
	cut     map[[2]int]bool // [from, to]: that way's traffic is dropped
	proxies []*peerProxy
}

// peerProxy is the proxy before one member's peer port.
type peerProxy struct {
	net    *peerNet
	to     int // the member behind it
	target string
	ln     net.Listener
	mu     sync.Mutex
	conns  map[*peerConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// peerConn is one connection through a peerProxy.
type peerConn struct {
	client, server net.Conn
	from           atomic.Value // string: X-Server-From of its first request
	dropped        atomic.Bool  // it lost bytes to a cut
	once           sync.Once
}

func newPeerNet() *peerNet { return &peerNet{cut: map[[2]int]bool{}} }

// add starts a proxy before member index's peer port, target.
func (n *peerNet) add(index int, target string) (*peerProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &peerProxy{net: n, to: index, target: target, ln: ln, conns: map[*peerConn]struct{}{}}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// setIDs tells the network the members' IDs, by index.
func (n *peerNet) setIDs(ids []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ids = ids
}

// partition cuts member m off from every other member, both ways.
func (n *peerNet) partition(m int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for o := range n.proxies {
		if o != m {
			n.cut[[2]int{m, o}], n.cut[[2]int{o, m}] = true, true
		}
	}
}

// cutFrom cuts what member m sends to every other member; it still
// receives.
func (n *peerNet) cutFrom(m int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for o := range n.proxies {
		if o != m {
			n.cut[[2]int{m, o}] = true
		}
	}
}

// heal lets every way through again, and closes the connections that lost
// bytes meanwhile.
func (n *peerNet) heal() {
	n.mu.Lock()
	clear(n.cut)
	proxies := n.proxies
	n.mu.Unlock()
	for _, p := range proxies {
		p.mu.Lock()
		var lossy []*peerConn
		for c := range p.conns {
			if c.dropped.Load() {
				lossy = append(lossy, c)
			}
		}
		p.mu.Unlock()
		for _, c := range lossy {
			c.close()
		}
	}
}

// blocked reports whether the traffic between the peer (its member ID in
// hex) and member local is cut, in the direction toPeer says.
func (n *peerNet) blocked(peer string, local int, toPeer bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := -1
	for j, id := range n.ids {
		if strings.EqualFold(id, peer) {
			i = j
		}
	}
	if i < 0 {
		return false
	}
	if toPeer {
		return n.cut[[2]int{local, i}]
	}
	return n.cut[[2]int{i, local}]
}

func (n *peerNet) close() {
	n.mu.Lock()
	proxies := n.proxies
	n.mu.Unlock()
	for _, p := range proxies {
		p.close()
	}
}

// Addr is where the member's peers reach it.
func (p *peerProxy) Addr() string { return p.ln.Addr().String() }

func (p *peerProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		c := &peerConn{client: client, server: server}
		c.from.Store("")
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.requests(c)
		go p.replies(c)
	}
}

// requests forwards c's request side: the peer's traffic to the member.
// It learns the peer from the first request's X-Server-From.
func (p *peerProxy) requests(c *peerConn) {
	defer p.done(c)
	r := bufio.NewReaderSize(c.client, 32<<10)
	var head []byte
	for len(head) < 64<<10 {
		line, err := r.ReadSlice('\n')
		head = append(head, line...)
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
		name, value, ok := strings.Cut(string(line), ":")
		if ok && strings.EqualFold(name, "X-Server-From") {
			c.from.Store(strings.TrimSpace(value))
		}
		if string(line) == "\r\n" {
			break
		}
	}
	if !p.forward(c, c.server, head, false) {
		return
	}
	p.copy(c, r, c.server, false)
}

// replies forwards c's reply side: the member's traffic to the peer.
func (p *peerProxy) replies(c *peerConn) {
	defer p.done(c)
	p.copy(c, c.server, c.client, true)
}

func (p *peerProxy) copy(c *peerConn, from io.Reader, to net.Conn, toPeer bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.forward(c, to, buf[:n], toPeer) {
			return
		}
		if err != nil {
			return
		}
	}
}

// forward writes b to to unless its way is cut, and reports whether the
// connection still works.
func (p *peerProxy) forward(c *peerConn, to net.Conn, b []byte, toPeer bool) bool {
	if p.net.blocked(c.from.Load().(string), p.to, toPeer) {
		c.dropped.Store(true)
		return true
	}
	_, err := to.Write(b)
	return err == nil
}

func (p *peerProxy) done(c *peerConn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.wg.Done()
}

func (c *peerConn) close() {
	c.once.Do(func() {
		_ = c.client.Close()
		_ = c.server.Close()
	})
}

// close stops listening, closes every connection and waits for its
// goroutines.
func (p *peerProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]*peerConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
}

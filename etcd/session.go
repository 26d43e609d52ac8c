package etcd

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// errClosed is the error of a call that needs the session of a closed
// provider.
var errClosed = errors.New("provider closed")

// session is the provider's own lease, kept alive while the provider is
// open (as concurrency.Session keeps one): the queue entries and the
// Listens of this process are on it, so that they go with the process.
// It is granted when first needed. When it is lost (the keepalive finds it
// expired: a partition longer than its TTL), the next call that needs one
// grants another, and every Listen of the provider lists itself again and
// tells its waiters to look again, since their entries went with it.
type session struct {
	p   *Provider
	ttl int64 // seconds

	mu        sync.Mutex
	id        clientv3.LeaseID // 0 when there is none
	stop      context.CancelFunc
	closed    bool
	listeners map[*listener]struct{}
	wg        sync.WaitGroup // the keepalive goroutine
}

// lease returns the session's lease, granting one if there is none.
func (s *session) lease(ctx context.Context) (clientv3.LeaseID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return 0, errClosed
	case s.id != 0:
		return s.id, nil
	}
	rctx, cancel := s.p.request(ctx)
	resp, err := s.p.cli.Grant(rctx, s.ttl)
	cancel()
	if err != nil {
		return 0, fail(err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := s.p.cli.KeepAlive(kctx, resp.ID)
	if err != nil {
		cancel()
		s.p.revoke([]clientv3.LeaseID{resp.ID})
		return 0, fail(err)
	}
	s.id, s.stop = resp.ID, cancel
	s.wg.Add(1)
	go s.keep(resp.ID, ch)
	return resp.ID, nil
}

// keep reads the keepalive replies of lease id until they end: the lease
// is gone, the client closed, or the session stopped it.
func (s *session) keep(id clientv3.LeaseID, ch <-chan *clientv3.LeaseKeepAliveResponse) {
	defer s.wg.Done()
	for range ch {
	}
	s.lost(id)
}

// lost forgets lease id if it is the session's, and tells the listeners.
func (s *session) lost(id clientv3.LeaseID) {
	s.mu.Lock()
	if s.id != id || s.closed {
		s.mu.Unlock()
		return
	}
	s.id = 0
	s.stop()
	ls := slices.Collect(maps.Keys(s.listeners))
	s.mu.Unlock()
	for _, l := range ls {
		l.sessionLost()
	}
}

// check asks the server whether the session's lease still exists, after a
// write found a lease missing, and forgets it if not.
func (s *session) check(ctx context.Context) {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	if id == 0 {
		return
	}
	resp, err := s.p.cli.TimeToLive(ctx, id)
	if err == nil && resp.TTL <= 0 {
		s.lost(id)
	}
}

func (s *session) add(l *listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listeners == nil {
		s.listeners = map[*listener]struct{}{}
	}
	s.listeners[l] = struct{}{}
}

// listening returns the provider's Listens of inbox.
func (s *session) listening(inbox string) []*listener {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ls []*listener
	for l := range s.listeners {
		if l.inbox == inbox {
			ls = append(ls, l)
		}
	}
	return ls
}

func (s *session) remove(l *listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, l)
}

// close stops the keepalive and revokes the lease, which deletes the
// process's queue entries and Listen keys at once rather than a TTL later.
func (s *session) close() {
	s.mu.Lock()
	id, stop := s.id, s.stop
	s.closed, s.id = true, 0
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.wg.Wait()
	if id != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = s.p.cli.Revoke(ctx, id)
	}
}

package locktest

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/seed05627090/lock"
)

// History records the operations of a run, from every Client of it (each
// a process, on a provider of its own), with their call and return times on
// one monotonic clock, this process's: the Clients of a run live in the
// process that records it. A linearizability checker ([History.Check],
// [CheckHistory]) judges it. It records at two places:
//
//   - in the store: every call a Client makes to a provider wrapped with
//     [History.Provider] (Acquire and Queue, with a grant and its token or
//     a refusal; Renew, Finish, Release, Leave, ForceRelease; the claim
//     methods), and every grant a waiter's inbox is told of (Listen), as the
//     Client sees them;
//   - in the Client: what a Lock, a Hold or a Term told its user (granted,
//     loss told, released clean or not; [History.Track],
//     [History.Released]), what Observe reported ([History.Observe]), and
//     the writes and reads of a fenced resource ([History.Fence]).
//
// A grant told to a waiter, by its inbox or by a later Queue or QueueClaim
// that finds the record its own, is recorded from the waiter's first Queue
// or QueueClaim call: the release that handed it on may have made it at any
// point since.
//
// A call that failed otherwise than with a refusal or a loss (a timeout, an
// outage, a process that died) is recorded as of unknown outcome: it stays
// open (its return time is infinite), and the checker may take it as done,
// at any point after its call, or as never done. The zero History is not
// usable: make one with NewHistory. Its methods are safe for concurrent use.
type History struct {
	start time.Time

	mu     sync.Mutex
	ops    []porcupine.Operation
	procs  int                   // processes given an id
	queued map[string]queuedCall // first Queue or QueueClaim call, by partition and owner
}

// NewHistory returns an empty History whose clock starts now.
func NewHistory() *History {
	return &History{
		start:  time.Now(),
		queued: make(map[string]queuedCall),
	}
}

// now is the time on the History's clock: nanoseconds since NewHistory, on
// the monotonic clock of this process.
func (h *History) now() int64 { return int64(time.Since(h.start)) }

// open is the return time of an operation of unknown outcome.
const open = math.MaxInt64

// add records one operation.
func (h *History) add(proc int, in input, call int64, out output, ret int64) {
	if out.res == resUnknown {
		ret = open
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: proc, Input: in, Call: call, Output: out, Return: ret})
}

// process gives a new process id, for the visualization's rows.
func (h *History) process() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.procs++
	return h.procs - 1
}

// Len returns the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// result is how an operation ended.
type result uint8

const (
	resOK      result = iota + 1 // granted, kept, released clean, accepted, read
	resRefused                   // refused (held, queued, stale)
	resLost                      // the store said the caller held nothing (a *lock.LostError)
	resUnknown                   // no answer, or an error that says nothing of the store
	resFailed                    // a read that failed (Observe's Leader with Err): it changed nothing
)

func (r result) String() string {
	switch r {
	case resOK:
		return "ok"
	case resRefused:
		return "refused"
	case resLost:
		return "lost"
	case resUnknown:
		return "unknown"
	case resFailed:
		return "failed"
	}
	return "?"
}

// opKind is what an operation did.
type opKind uint8

const (
	opGrant        opKind = iota + 1 // Acquire, Queue, or a grant told to an inbox
	opRenew                          // Renew
	opFinish                         // Finish
	opRelease                        // Release
	opLeave                          // Leave
	opForce                          // ForceRelease
	opClaim                          // AcquireClaim, QueueClaim, or a claim told to an inbox
	opClaimRenew                     // RenewClaim
	opClaimRelease                   // ReleaseClaim
	opClaimLeave                     // LeaveClaim
	opClaimLower                     // LowerClaim
	opWrite                          // a write through a fence
	opRead                           // a read of the fenced resource
	opObserved                       // a Leader that Observe sent
	opHeld                           // a Client returned a held Lock, Hold or Term
	opTold                           // a Lock's Done closed with a loss
	opDropped                        // a Client's Release of its Lock, Hold or Term
)

var kindNames = map[opKind]string{
	opGrant: "acquire", opRenew: "renew", opFinish: "finish", opRelease: "release", opLeave: "leave",
	opForce: "force-release", opClaim: "claim", opClaimRenew: "renew-claim", opClaimRelease: "release-claim",
	opClaimLeave: "leave-claim", opClaimLower: "lower-claim", opWrite: "write", opRead: "read",
	opObserved: "observed", opHeld: "held", opTold: "loss-told", opDropped: "client-release",
}

func (k opKind) String() string { return kindNames[k] }

// Partitions: each operation belongs to one, named by a prefix and the key,
// fence, or owner; each is checked apart (porcupine's partitions).
const (
	partLock    = "lock "    // a lock's key: the lock model
	partClaims  = "claims "  // a counted name's key: the claims model
	partFence   = "fence "   // a fenced resource: the register model
	partObserve = "observe " // one Observe of a role (its key, and the grants copied in)
	partClient  = "client "  // one owner's Lock, Hold or Term, as its Client told it
)

// input is an operation's call.
type input struct {
	kind   opKind
	part   string // the partition
	owner  string
	via    string // how a grant came: "acquire", "queue", "inbox"
	token  uint64 // a write's token
	weight int    // a claim's weight (or a LowerClaim's new weight)
	limit  int    // a claim's limit
	value  string // a write's value
}

// output is an operation's return.
type output struct {
	res   result
	token uint64 // a grant's token; an observed term
	owner string // an observed leader; the owner a ForceRelease removed
	value string // a read's value
}

// classify says what err, returned by a call to the store, says of its
// outcome: nil done, a *lock.LostError lost, anything else unknown.
func classify(err error) result {
	switch {
	case err == nil:
		return resOK
	case errors.Is(err, lock.ErrLost):
		return resLost
	}
	return resUnknown
}

// Provider returns p with every call recorded in h, as one process: give
// each Client (each process of the run) a provider of its own from
// Provider. What the calls return is what p returns.
func (h *History) Provider(p lock.Provider) lock.Provider {
	return &recorded{Provider: p, h: h, proc: h.process()}
}

// recorded is a Provider whose calls are recorded in a History.
type recorded struct {
	lock.Provider
	h    *History
	proc int
}

func (r *recorded) grant(key, owner, via string, call int64, rec lock.Record, err error) {
	out := output{res: resRefused}
	switch {
	case err != nil:
		out.res = resUnknown
	case rec.Owner == owner && !rec.GracePeriod:
		out = output{res: resOK, token: rec.Token}
	}
	r.h.add(r.proc, input{kind: opGrant, part: partLock + key, owner: owner, via: via}, call, out, r.h.now())
}

// queuedCall is the first Queue or QueueClaim call of an owner: when, and
// the limit it gave (a claim's).
type queuedCall struct {
	call  int64
	limit int
}

// queuedAt notes the first Queue or QueueClaim call of owner in part.
func (h *History) queuedAt(part, owner string, call int64, limit int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.queued[part+"\x00"+owner]; !ok {
		h.queued[part+"\x00"+owner] = queuedCall{call, limit}
	}
}

// firstQueued returns the first Queue or QueueClaim call of owner in part:
// its time, or 0 (the start of the run) when there was none, and its limit.
func (h *History) firstQueued(part, owner string) queuedCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.queued[part+"\x00"+owner]
}

func (r *recorded) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lock.Record, error) {
	call := r.h.now()
	rec, err := r.Provider.Acquire(ctx, key, owner, ttl)
	r.grant(key, owner, "acquire", call, rec, err)
	return rec, err
}

// Queue records the call and its outcome: a grant, or an outcome unknown,
// from the owner's first Queue call, not this one's. The release that
// handed the lock to the queued owner may have stored its record at any
// point since; this call may only tell it (the inbox was not told, or not
// yet: a cut connection).
func (r *recorded) Queue(ctx context.Context, key string, w lock.Wait) (lock.Record, error) {
	call := r.h.now()
	part := partLock + key
	r.h.queuedAt(part, w.Owner, call, 0)
	rec, err := r.Provider.Queue(ctx, key, w)
	if err != nil || rec.Owner == w.Owner && !rec.GracePeriod {
		call = r.h.firstQueued(part, w.Owner).call
	}
	r.grant(key, w.Owner, "queue", call, rec, err)
	return rec, err
}

// store records a call that changes a record and answers with an error
// only.
func (r *recorded) store(kind opKind, part, owner string, call int64, err error) error {
	r.h.add(r.proc, input{kind: kind, part: part, owner: owner}, call, output{res: classify(err)}, r.h.now())
	return err
}

func (r *recorded) Leave(ctx context.Context, key string, w lock.Wait) error {
	call := r.h.now()
	return r.store(opLeave, partLock+key, w.Owner, call, r.Provider.Leave(ctx, key, w))
}

func (r *recorded) Release(ctx context.Context, key, owner string) error {
	call := r.h.now()
	return r.store(opRelease, partLock+key, owner, call, r.Provider.Release(ctx, key, owner))
}

func (r *recorded) Renew(ctx context.Context, key, owner string, ttl time.Duration) error {
	call := r.h.now()
	return r.store(opRenew, partLock+key, owner, call, r.Provider.Renew(ctx, key, owner, ttl))
}

func (r *recorded) Finish(ctx context.Context, key, owner string, ttl time.Duration) error {
	call := r.h.now()
	return r.store(opFinish, partLock+key, owner, call, r.Provider.Finish(ctx, key, owner, ttl))
}

func (r *recorded) ForceRelease(ctx context.Context, key string) (lock.Record, error) {
	call := r.h.now()
	rec, err := r.Provider.ForceRelease(ctx, key)
	out := output{res: classify(err), owner: rec.Owner}
	if err != nil {
		out.res = resUnknown
	}
	r.h.add(r.proc, input{kind: opForce, part: partLock + key}, call, out, r.h.now())
	return rec, err
}

// Listen records every grant told to the inbox: a lock or a claim handed
// to an owner from the queue, between the owner's first Queue call and the
// delivery.
func (r *recorded) Listen(ctx context.Context, inbox string, deliver func(lock.Notice)) (func(), error) {
	return r.Provider.Listen(ctx, inbox, func(n lock.Notice) {
		if n.Key != "" && n.Owner != "" {
			ret := r.h.now()
			if n.Weight > 0 {
				part := partClaims + n.Key
				q := r.h.firstQueued(part, n.Owner)
				in := input{kind: opClaim, part: part, owner: n.Owner, via: "inbox", weight: n.Weight, limit: q.limit}
				r.h.add(r.proc, in, q.call, output{res: resOK, token: n.Token}, ret)
			} else {
				part := partLock + n.Key
				in := input{kind: opGrant, part: part, owner: n.Owner, via: "inbox"}
				r.h.add(r.proc, in, r.h.firstQueued(part, n.Owner).call, output{res: resOK, token: n.Token}, ret)
			}
		}
		deliver(n)
	})
}

func (r *recorded) claim(key string, c lock.Claim, via string, call int64, rec lock.Record, err error) {
	out := output{res: resRefused}
	switch {
	case err != nil:
		out.res = resUnknown
	case rec.Owner == c.Owner:
		out = output{res: resOK, token: rec.Token}
	}
	in := input{kind: opClaim, part: partClaims + key, owner: c.Owner, via: via, weight: c.Weight, limit: c.Limit}
	r.h.add(r.proc, in, call, out, r.h.now())
}

func (r *recorded) AcquireClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	call := r.h.now()
	rec, err := r.Provider.AcquireClaim(ctx, key, c)
	r.claim(key, c, "acquire", call, rec, err)
	return rec, err
}

// QueueClaim records the call and its outcome as Queue does: a claim
// granted, or an outcome unknown, from the owner's first QueueClaim call,
// since the claim may have been handed to the queued owner at any point
// since.
func (r *recorded) QueueClaim(ctx context.Context, key string, c lock.Claim) (lock.Record, error) {
	call := r.h.now()
	part := partClaims + key
	r.h.queuedAt(part, c.Owner, call, c.Limit)
	rec, err := r.Provider.QueueClaim(ctx, key, c)
	if err != nil || rec.Owner == c.Owner {
		call = r.h.firstQueued(part, c.Owner).call
	}
	r.claim(key, c, "queue", call, rec, err)
	return rec, err
}

func (r *recorded) LeaveClaim(ctx context.Context, key string, c lock.Claim) error {
	call := r.h.now()
	return r.store(opClaimLeave, partClaims+key, c.Owner, call, r.Provider.LeaveClaim(ctx, key, c))
}

func (r *recorded) RenewClaim(ctx context.Context, key, owner string, ttl time.Duration) error {
	call := r.h.now()
	return r.store(opClaimRenew, partClaims+key, owner, call, r.Provider.RenewClaim(ctx, key, owner, ttl))
}

func (r *recorded) ReleaseClaim(ctx context.Context, key, owner string) error {
	call := r.h.now()
	return r.store(opClaimRelease, partClaims+key, owner, call, r.Provider.ReleaseClaim(ctx, key, owner))
}

func (r *recorded) LowerClaim(ctx context.Context, key, owner string, weight int) error {
	call := r.h.now()
	err := r.Provider.LowerClaim(ctx, key, owner, weight)
	r.h.add(r.proc, input{kind: opClaimLower, part: partClaims + key, owner: owner, weight: weight}, call, output{res: classify(err)}, r.h.now())
	return err
}

// Fence is a fenced resource: a value per name, written only with a token
// not below the greatest token that has written it (its mark), as
// lock.RedisFence, lock.SQLFence, postgres.Fence and etcd.Fence keep one.
type Fence interface {
	// Write sets name's value to value when token is not below its mark, and
	// raises the mark to token. It returns nil when it wrote, an error
	// matching lock.ErrStaleToken when the mark was greater (nothing
	// written), and any other error when the outcome is unknown.
	Write(ctx context.Context, name string, token uint64, value string) error
	// Read returns name's value, "" when it was never written.
	Read(ctx context.Context, name string) (string, error)
}

// Fence returns f with every write and read recorded in h, as one process.
func (h *History) Fence(f Fence) Fence {
	return &recordedFence{f: f, h: h, proc: h.process()}
}

type recordedFence struct {
	f    Fence
	h    *History
	proc int
}

func (r *recordedFence) Write(ctx context.Context, name string, token uint64, value string) error {
	call := r.h.now()
	err := r.f.Write(ctx, name, token, value)
	out := output{res: resOK}
	switch {
	case errors.Is(err, lock.ErrStaleToken):
		out.res = resRefused
	case err != nil:
		out.res = resUnknown
	}
	r.h.add(r.proc, input{kind: opWrite, part: partFence + name, token: token, value: value}, call, out, r.h.now())
	return err
}

func (r *recordedFence) Read(ctx context.Context, name string) (string, error) {
	call := r.h.now()
	v, err := r.f.Read(ctx, name)
	out := output{res: resOK, value: v}
	if err != nil {
		out.res = resUnknown
	}
	r.h.add(r.proc, input{kind: opRead, part: partFence + name}, call, out, r.h.now())
	return v, err
}

// Held is what a Client grants and tells the end of: a *lock.Lock, a
// *lock.Hold or a *lock.Term.
type Held interface {
	Done() <-chan struct{}
	Err() error
	Token() uint64
}

// Track records that a Client returned held to the caller, whose Owner
// (Lock.Owner, Term.Owner, the Owner of a Hold's Lock) is owner, in a call
// that began at call (on h's clock: see Now), and watches it until it ends:
// a loss told (Done closed with Err a *lock.LostError) is recorded when it
// is seen. Record its release with Released. Track returns at once; what it
// started ends when Done is closed.
func (h *History) Track(proc int, call int64, owner string, held Held) {
	part := partClient + owner
	watch := h.now()
	h.add(proc, input{kind: opHeld, part: part, owner: owner}, call, output{res: resOK, token: held.Token()}, watch)
	go func() {
		<-held.Done()
		if errors.Is(held.Err(), lock.ErrLost) {
			h.add(proc, input{kind: opTold, part: part, owner: owner}, watch, output{res: resOK}, h.now())
		}
	}()
}

// Released records what the release of owner's hold (Lock.Release,
// Hold.Release, Term.Resign), called at call, returned: err nil is a clean
// release, a *lock.LostError a loss, anything else neither.
func (h *History) Released(proc int, owner string, call int64, err error) {
	h.add(proc, input{kind: opDropped, part: partClient + owner, owner: owner}, call, output{res: classify(err)}, h.now())
}

// Now returns the time on h's clock, for the call time given to Track.
func (h *History) Now() int64 { return h.now() }

// Process returns a new process id, for the operations a Client's user
// records (Track, Released) beside those of its provider.
func (h *History) Process() int { return h.process() }

// Observe records every Leader that ch (what c.Observe(ctx, role)
// returned) sends, until it is closed: each is an operation from just
// after the previous receipt (the call to Observe for the first) to its
// own, so that they keep the channel's order. It returns at once, and done
// is closed once ch is.
func (h *History) Observe(c *lock.Client, role string, ch <-chan lock.Leader) (done <-chan struct{}) {
	proc := h.process()
	key := c.Key(role)
	part := partObserve + key + " #" + strconv.Itoa(proc)
	d := make(chan struct{})
	go func() {
		defer close(d)
		prev := h.now()
		for ld := range ch {
			ret := h.now()
			out := output{res: resOK, token: ld.Term, owner: ld.Owner}
			if ld.Err != nil {
				out.res = resFailed
			}
			h.add(proc, input{kind: opObserved, part: part, via: key}, prev, out, ret)
			// The next Leader was read after this one was sent: its call
			// follows this return (operations that touch are concurrent).
			prev = ret + 1
		}
	}()
	return d
}

// memFence is a fenced resource in this process's memory: the suite's,
// for backends that bring none.
type memFence struct {
	mu   sync.Mutex
	vals map[string]fenceCell
}

type fenceCell struct {
	value string
	mark  uint64
}

// NewMemoryFence returns a Fence in this process's memory, correct by
// construction: a run's fenced writes then check the tokens the backend
// gave, not the fence.
func NewMemoryFence() Fence { return &memFence{vals: make(map[string]fenceCell)} }

func (f *memFence) Write(_ context.Context, name string, token uint64, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.vals[name]
	if token < c.mark {
		return &lock.StaleTokenError{Fence: name, Token: token, Mark: c.mark}
	}
	f.vals[name] = fenceCell{value: value, mark: token}
	return nil
}

func (f *memFence) Read(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.vals[name].value, nil
}

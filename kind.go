package lock

// Kind is what a key is in use as: a lock, or a counted name of one kind.
// A key is one kind at a time: a lock's record and a counted name's claims
// or waiters are never stored under one key together (see
// [Provider.AcquireClaim]), and the Client refuses the mix with
// [ErrInvalidArgument], naming both kinds. An election's role is a lock
// (the Client tells it by its holder's owner).
type Kind string

// The kinds of [Kind].
const (
	KindLock      Kind = "lock"      // a lock's record: Acquire, Do, Campaign...
	KindSemaphore Kind = "semaphore" // the counted name of a Semaphore
	KindRWMutex   Kind = "rwmutex"   // the counted name of an RWMutex
)

// counted reports whether k is the kind of a counted name.
func (k Kind) counted() bool { return k == KindSemaphore || k == KindRWMutex }

// roleMix returns an error when one of owner, who asks for the lock under
// key, and holder, who holds it, is an election's candidate (Campaign,
// Lead) and the other is not: a role taken with Acquire, or a lock
// campaigned for, would wait for a holder that never hands it over.
func roleMix(key, owner, holder string) error {
	if holder == "" || isRole(owner) == isRole(holder) {
		return nil
	}
	return kindsMixed(key, kindSaid("", holder), kindSaid("", owner))
}

// kindMix returns an error when rec, the answer to the acquisition's
// request, shows the key in use as another kind than the acquisition's
// (see [Kind]: a counted name for a lock, a lock or a counted name of the
// other kind for a claim), or its counted name with another limit: the
// provider changed nothing then. A Record without a Kind (of a name
// stored before kinds were) is checked for its limit alone.
func (a *acquisition) kindMix(rec Record) error {
	mine := a.claim.kind // empty for a lock
	switch {
	case !a.claim.counted() && rec.Kind.counted(),
		a.claim.counted() && rec.Kind != "" && rec.Kind != mine:
		return kindsMixed(a.key, kindSaid(rec.Kind, rec.Owner), kindSaid(mine, a.owner))
	case a.claim.counted() && rec.Limit != a.claim.limit:
		return invalidf("%q is in use with a limit of %d, not %d: every caller of a semaphore or read-write lock must give the same", a.key, rec.Limit, a.claim.limit)
	}
	return nil
}

// kindsMixed is the error of an acquisition of key as want, which is in
// use as have.
func kindsMixed(key, have, want string) error {
	return invalidf("%q is in use as %s, not %s: a name is one kind at a time", key, have, want)
}

// kindSaid names kind for an error: a counted name's, or for a lock (kind
// empty or KindLock) a lock's or, when owner is a role's candidate or
// leader, an election role's.
func kindSaid(kind Kind, owner string) string {
	switch {
	case kind == KindSemaphore:
		return "a Semaphore"
	case kind == KindRWMutex:
		return "an RWMutex"
	case kind != "" && kind != KindLock:
		return "a " + string(kind) // of a provider that knows more kinds
	case isRole(owner):
		return "an election role (Campaign, Lead)"
	}
	return "a lock (Acquire, Do)"
}

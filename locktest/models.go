package locktest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The models the checker holds a History to, one per kind of partition.
// Each is a sequential specification: a step says whether the operation
// could have happened, as recorded, in a state, and which states follow
// (several when the model cannot tell; none when it could not happen). A
// lease is time, which the checker does not trust: so an expiry is a step a
// model may take at any moment, and what the models catch is order, not
// timing. They are written out in docs/testing.md.

// lockState is a lock's record as the model knows it.
type lockState struct {
	holder   string // "" when free
	token    uint64 // the holder's grant's; 0 when unknown (a grant of unknown outcome)
	max      uint64 // the greatest token granted
	finished bool   // in a grace period
}

// expired is s after its record expired (or was freed).
func (s lockState) expired() lockState { return lockState{max: s.max} }

// stepLock: a grant's token is above every earlier grant's (a grant told
// again, same owner and token, is no new grant); the record a grant
// replaces has expired (a step the model may take at any moment); a renew,
// finish or clean release succeeds only for the holder; a loss says the
// caller held nothing, so a holder told lost has expired. Refusals are not
// judged: a hand-off to a waiter that was never told (it gave up, it
// stalled) can make any refusal right.
func stepLock(s lockState, in input, out output) []lockState {
	mine := s.holder == in.owner && s.holder != ""
	live := mine && !s.finished
	switch in.kind {
	case opGrant:
		switch out.res {
		case resOK:
			if live && s.token == out.token {
				return []lockState{s} // the same grant, told again
			}
			if out.token > s.max {
				return []lockState{{holder: in.owner, token: out.token, max: out.token}}
			}
			return nil
		case resUnknown:
			if live {
				return []lockState{s}
			}
			return []lockState{s, {holder: in.owner, max: s.max}}
		}
		return []lockState{s}
	case opRenew, opFinish:
		next := s
		if in.kind == opFinish {
			next.finished = true
		}
		switch out.res {
		case resOK:
			if live {
				return []lockState{next}
			}
			return nil
		case resLost:
			if live {
				return []lockState{s.expired()}
			}
			return []lockState{s}
		}
		if live && in.kind == opFinish {
			return []lockState{s, next}
		}
		return []lockState{s}
	case opRelease, opLeave:
		switch {
		case out.res == resOK && in.kind == opRelease:
			if mine {
				return []lockState{s.expired()}
			}
			return nil
		case out.res == resUnknown && mine:
			return []lockState{s, s.expired()}
		case mine:
			return []lockState{s.expired()}
		}
		return []lockState{s}
	case opForce:
		if out.res == resUnknown {
			return []lockState{s, s.expired()}
		}
		// A forced release frees whatever is there; the owner it names may
		// be a waiter handed the lock and not told yet.
		return []lockState{s.expired()}
	}
	return nil
}

// claimsState is a counted name's live claims as the model knows them.
type claimsState struct {
	held     string // the claims, "owner weight token;" each, sorted
	max      uint64 // the greatest token granted
	maxQueue bool   // max came from a grant from the queue, which others of the same call may share
}

type claimEntry struct {
	owner  string
	weight int
	token  uint64
}

func (s claimsState) claims() []claimEntry {
	var cs []claimEntry
	for _, f := range strings.Split(s.held, ";") {
		if f == "" {
			continue
		}
		p := strings.Fields(f)
		w, _ := strconv.Atoi(p[1])
		tok, _ := strconv.ParseUint(p[2], 10, 64)
		cs = append(cs, claimEntry{p[0], w, tok})
	}
	return cs
}

func (s claimsState) with(cs []claimEntry) claimsState {
	slices.SortFunc(cs, func(a, b claimEntry) int { return strings.Compare(a.owner, b.owner) })
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%s %d %d;", c.owner, c.weight, c.token)
	}
	s.held = b.String()
	return s
}

func (s claimsState) find(owner string) (int, []claimEntry) {
	cs := s.claims()
	for i, c := range cs {
		if c.owner == owner {
			return i, cs
		}
	}
	return -1, cs
}

func (s claimsState) without(owner string) claimsState {
	i, cs := s.find(owner)
	if i < 0 {
		return s
	}
	return s.with(slices.Delete(cs, i, i+1))
}

// add returns the states with c added that keep the live weights within
// limit: c alone when it fits, else with each set of the other claims
// expired that makes it fit (an expiry is a step the model may take).
func (s claimsState) add(c claimEntry, limit int) []claimsState {
	cs := s.claims()
	var out []claimsState
	for mask := 0; mask < 1<<len(cs); mask++ {
		kept, used := []claimEntry{c}, c.weight
		for i, o := range cs {
			if mask&(1<<i) == 0 {
				kept = append(kept, o)
				used += o.weight
			}
		}
		if used <= limit {
			out = append(out, s.with(kept))
		}
		if mask == 0 && used <= limit {
			break // it fits with every claim kept: expiring some is left to the steps that need it
		}
	}
	return out
}

// stepClaims: a claim is granted only when the weights of the live claims
// and its own add up to at most the limit (the claims it does not fit beside
// have expired, a step the model may take at any moment); its token is above
// every earlier claim's of the name, or equal to the last one when both came
// from the queue (one call may grant several, with one token); renew,
// lower and clean release succeed only for a live claim.
func stepClaims(s claimsState, in input, out output) []claimsState {
	i, _ := s.find(in.owner)
	live := i >= 0
	fromQueue := in.via != "acquire"
	switch in.kind {
	case opClaim:
		switch out.res {
		case resOK:
			if _, cs := s.find(in.owner); live && cs[i].token == out.token {
				return []claimsState{s} // the same grant, told again
			}
			switch {
			case out.token > s.max:
				s.max, s.maxQueue = out.token, fromQueue
			case out.token == s.max && s.maxQueue && fromQueue:
			default:
				return nil
			}
			return s.without(in.owner).add(claimEntry{in.owner, in.weight, out.token}, in.limit)
		case resUnknown:
			if live {
				return []claimsState{s}
			}
			return append([]claimsState{s}, s.add(claimEntry{in.owner, in.weight, 0}, in.limit)...)
		}
		return []claimsState{s}
	case opClaimRenew:
		switch out.res {
		case resOK:
			if live {
				return []claimsState{s}
			}
			return nil
		case resLost:
			return []claimsState{s.without(in.owner)}
		}
		return []claimsState{s}
	case opClaimRelease, opClaimLeave:
		switch {
		case out.res == resOK && in.kind == opClaimRelease:
			if live {
				return []claimsState{s.without(in.owner)}
			}
			return nil
		case out.res == resUnknown && live:
			return []claimsState{s, s.without(in.owner)}
		}
		return []claimsState{s.without(in.owner)}
	case opClaimLower:
		if !live {
			if out.res == resOK {
				return nil
			}
			return []claimsState{s}
		}
		_, cs := s.find(in.owner)
		lowered := s
		if in.weight < cs[i].weight {
			cs[i].weight = in.weight
			lowered = s.with(cs)
		}
		switch out.res {
		case resOK:
			return []claimsState{lowered}
		case resLost:
			return []claimsState{s.without(in.owner)}
		}
		return []claimsState{s, lowered}
	}
	return nil
}

// fenceState is a fenced resource: its value and its mark.
type fenceState struct {
	value string
	mark  uint64
}

// stepFence: a register whose writes carry tokens. A write is accepted only
// with a token not below the mark (and sets value and mark), refused as
// stale only with a token below it; a read returns the value.
func stepFence(s fenceState, in input, out output) []fenceState {
	switch in.kind {
	case opWrite:
		next := fenceState{value: in.value, mark: in.token}
		switch out.res {
		case resOK:
			if in.token >= s.mark {
				return []fenceState{next}
			}
			return nil
		case resRefused:
			if in.token < s.mark {
				return []fenceState{s}
			}
			return nil
		}
		if in.token >= s.mark {
			return []fenceState{s, next}
		}
		return []fenceState{s}
	case opRead:
		if out.res != resOK || out.value == s.value {
			return []fenceState{s}
		}
		return nil
	}
	return nil
}

// observeState is what one Observe of a role has sent, against the terms
// granted so far.
type observeState struct {
	last   uint64 // the last term sent
	seen   string // the grants linearized so far, "token owner;" each ("? owner;" for a token unknown)
	failed bool   // the last Leader sent had Err set: the next may repeat the term before it
}

// unknownToken stands for the token of a grant of unknown outcome in
// observeState.seen.
const unknownToken = "?"

// stepObserve: the grants of the role's lock are copied into each of its
// Observe's partitions. A term Observe sends is above the one it sent
// before (terms are sent in order, each once; after a Leader with Err, the
// state read next is sent whatever it says, so it may repeat the term
// sent before the failure), and was granted, to the
// owner it names, before it was sent: a grant recorded; a grant of unknown
// outcome (its reply lost: the store may have granted it, with a token
// nobody was told), which stands for one term of its owner's; or, for a
// term no recorded grant has, a hand-off to an owner that queued for the
// role and was not told (hidden).
func stepObserve(s observeState, in input, out output) []observeState {
	switch in.kind {
	case opGrant:
		switch out.res {
		case resOK:
			s.seen += strconv.FormatUint(out.token, 10) + " " + in.owner + ";"
		case resUnknown:
			granted := s
			granted.seen += unknownToken + " " + in.owner + ";"
			return []observeState{s, granted}
		}
		return []observeState{s}
	case opObserved:
		if out.res != resOK {
			s.failed = true
			return []observeState{s}
		}
		again := s.failed && out.token == s.last
		s.failed = false
		if out.token == 0 || again {
			return []observeState{s}
		}
		if out.token <= s.last {
			return nil
		}
		term := strconv.FormatUint(out.token, 10) + " " + out.owner + ";"
		unknown := unknownToken + " " + out.owner + ";"
		switch {
		case strings.Contains(";"+s.seen, ";"+term), in.value == hiddenGrant:
		case strings.Contains(";"+s.seen, ";"+unknown):
			s.seen = strings.Replace(";"+s.seen, ";"+unknown, ";"+term, 1)[1:] // its token is known now
		default:
			return nil
		}
		s.last = out.token
		return []observeState{s}
	}
	return nil
}

// hiddenGrant marks, in an observed operation's input, a term that no
// recorded grant has, told by an owner that queued for the role.
const hiddenGrant = "hidden"

// clientState is one Lock, Hold or Term as its Client told it.
type clientState struct {
	told  bool // its loss was told
	clean bool // its release was told clean
}

// stepClient: a Client never tells both a loss and a clean release of one
// hold: a release is never reported clean after a loss.
func stepClient(s clientState, in input, out output) []clientState {
	switch in.kind {
	case opHeld:
		return []clientState{s}
	case opTold:
		if s.clean {
			return nil
		}
		s.told = true
		return []clientState{s}
	case opDropped:
		if out.res == resOK {
			if s.told {
				return nil
			}
			s.clean = true
		}
		return []clientState{s}
	}
	return nil
}

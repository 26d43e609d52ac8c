package locktest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// hstep is one operation of a hand-made history: its call and return on the
// History's clock (return open for an unknown outcome).
type hstep struct {
	call, ret int64
	in        input
	out       output
}

// checkSteps records steps in a new History and checks it.
func checkSteps(t *testing.T, steps []hstep) Result {
	t.Helper()
	h := NewHistory()
	for i, s := range steps {
		h.add(i%3, s.in, s.call, s.out, s.ret)
	}
	return h.Check(t.TempDir(), t.Name())
}

// TestModelsJudgeOrder: hand-made histories, each a case the models must
// accept or refuse, for the models the planted defects (defects_test.go)
// do not reach: an Observe's, a hold's, and the open operations of a lock.
func TestModelsJudgeOrder(t *testing.T) {
	const key = "lock:{k}"
	lk, obs, cl := partLock+key, partObserve+key+" #0", partClient+"a"
	grant := func(call, ret int64, owner string, token uint64) hstep {
		return hstep{call, ret, input{kind: opGrant, part: lk, owner: owner, via: "acquire"}, output{res: resOK, token: token}}
	}
	unknownGrant := func(call int64, owner string) hstep {
		return hstep{call, open, input{kind: opGrant, part: lk, owner: owner, via: "acquire"}, output{res: resUnknown}}
	}
	observed := func(call, ret int64, owner string, term uint64) hstep {
		return hstep{call, ret, input{kind: opObserved, part: obs, via: key}, output{res: resOK, token: term, owner: owner}}
	}
	for _, c := range []struct {
		name  string
		steps []hstep
		legal bool
	}{
		{"terms observed in order", []hstep{grant(0, 1, "a", 5), grant(2, 3, "b", 7), observed(0, 4, "a", 5), observed(5, 6, "b", 7)}, true},
		{"a term observed going down", []hstep{grant(0, 1, "a", 5), grant(2, 3, "b", 7), observed(3, 4, "b", 7), observed(5, 6, "a", 5)}, false},
		{"a term observed twice", []hstep{grant(0, 1, "a", 5), observed(1, 2, "a", 5), observed(3, 4, "a", 5)}, false},
		{"a term repeated after a failed read", []hstep{grant(0, 1, "a", 5), observed(1, 2, "a", 5),
			{3, 4, input{kind: opObserved, part: obs, via: key}, output{res: resFailed}}, observed(5, 6, "a", 5)}, true},
		{"a term repeated without a failed read between", []hstep{grant(0, 1, "a", 5), observed(1, 2, "a", 5),
			{3, 4, input{kind: opObserved, part: obs, via: key}, output{res: resFailed}}, observed(5, 6, "a", 5), observed(7, 8, "a", 5)}, false},
		{"a term observed before it was granted", []hstep{observed(0, 1, "a", 5), grant(2, 3, "a", 5)}, false},
		{"a term no grant had", []hstep{grant(0, 1, "a", 5), observed(1, 2, "b", 6)}, false},
		{"a term of a grant of unknown outcome", []hstep{unknownGrant(0, "a"), observed(1, 2, "a", 5)}, true},
		{"a term observed before its grant of unknown outcome was asked", []hstep{observed(0, 1, "a", 5), unknownGrant(2, "a")}, false},
		{"two terms of one grant of unknown outcome", []hstep{unknownGrant(0, "a"), observed(1, 2, "a", 5), observed(3, 4, "a", 6)}, false},
		{"a term observed with another owner", []hstep{grant(0, 1, "a", 5), observed(1, 2, "b", 5)}, false},
		{"a loss told, then a clean release", []hstep{
			{0, 1, input{kind: opHeld, part: cl, owner: "a"}, output{res: resOK, token: 5}},
			{2, 3, input{kind: opTold, part: cl, owner: "a"}, output{res: resOK}},
			{4, 5, input{kind: opDropped, part: cl, owner: "a"}, output{res: resOK}}}, false},
		{"a loss told, then the release says lost", []hstep{
			{0, 1, input{kind: opHeld, part: cl, owner: "a"}, output{res: resOK, token: 5}},
			{2, 3, input{kind: opTold, part: cl, owner: "a"}, output{res: resOK}},
			{4, 5, input{kind: opDropped, part: cl, owner: "a"}, output{res: resLost}}}, true},
		{"a release of unknown outcome, then another holder", []hstep{grant(0, 1, "a", 5),
			{2, open, input{kind: opRelease, part: lk, owner: "a"}, output{res: resUnknown}}, grant(3, 4, "b", 6)}, true},
		{"a renewal after another was granted", []hstep{grant(0, 1, "a", 5), grant(2, 3, "b", 6),
			{4, 5, input{kind: opRenew, part: lk, owner: "a"}, output{res: resOK}}}, false},
		{"a renewal of a grant of unknown outcome", []hstep{
			{0, open, input{kind: opGrant, part: lk, owner: "a", via: "queue"}, output{res: resUnknown}},
			{2, 3, input{kind: opRenew, part: lk, owner: "a"}, output{res: resOK}}}, true},
	} {
		r := checkSteps(t, c.steps)
		assert.Equal(t, c.legal, len(r.Illegal) == 0, "%s: %s", c.name, r)
	}
}

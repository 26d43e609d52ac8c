package faults_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The report of a Sentinel failover run (sentinel_failover_test.go): from
// the grants, errors and ends that the children reported and the times of
// the kills, what the library guarantees is checked (no overlap on one
// primary, tokens never below an earlier one) and what it does not is
// measured and printed ("faults: failover ..." lines, the README's figures).

// durs are measured durations.
type durs []time.Duration

// String is "p50 X, max Y (n=N)", or "-" for none.
func (d durs) String() string {
	if len(d) == 0 {
		return "-"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("p50 %v, max %v (n=%d)", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}

// say prints a figure for the README.
func (r *failoverRun) say(format string, args ...any) {
	figures(r.label+" "+format, args...)
}

// analyse checks what the library guarantees and prints what it measured.
func (r *failoverRun) analyse() {
	t := r.t
	r.mu.Lock() // the collectors are done; this only keeps the race detector informed
	defer r.mu.Unlock()
	stats.grants.Add(int64(len(r.grants)))
	r.attribute()
	for _, g := range r.grants {
		expect(t, g.ended, "the grant of %s with token %d to child %d never ended: its holder was neither told nor released", g.lock, g.token, g.proc)
	}
	byLock := make(map[string][]*foGrant)
	for _, g := range r.grants {
		byLock[g.lock] = append(byLock[g.lock], g)
	}
	for _, gs := range byLock {
		slices.SortFunc(gs, func(a, b *foGrant) int { return a.got.Compare(b.got) })
	}
	ov := r.overlaps(byLock)
	repeated, backwards := r.tokens(byLock)
	holders := r.holders()
	r.ghostsSurvived()
	resumedAfter, failedAfter := r.waiters()
	r.nextGrants(byLock)
	r.checkChildren()

	wait := "no WaitForReplicas"
	if r.wait > 0 {
		wait = fmt.Sprintf("WaitForReplicas(%d, %v)", r.wait, failoverReplicaTimeout)
	}
	r.say("setup: 1 master + 2 replicas + 3 sentinels (down-after 750ms, failover-timeout 1.5s); %d processes x %d goroutines on %d locks, leases %v, poll interval 1s and release timeout 5s (defaults), %s",
		failoverProcs, failoverGoroutines, failoverLocks, failoverLeases, wait)
	for _, f := range r.failovers {
		r.say("#%d %s: promoted %v after the kill (every sentinel %v, old master back as a replica %v), %dB unreplicated; holders %d: told %d, kept %d, lost at release %d, release failed %d; waiters %d: resumed %d, failed %d; next grant after the promotion %v; overlaps %d, repeated tokens %d; wait queues %d entries, %d of ended acquisitions (%d still there at the next look)",
			f.n, f.mode, ms(f.promoted.Sub(f.kill)), ms(f.agreed.Sub(f.kill)), ms(f.stable.Sub(f.kill)), f.unreplicated,
			f.holders, f.told, f.kept, f.lostAtRelease, f.releaseFailed, f.waiters, f.resumed, f.failed, f.nextGrant, f.overlaps, f.repeated, f.queued, len(f.ghosts), f.ghostsSurvived)
	}
	r.summary(ov, repeated, backwards, holders, resumedAfter, failedAfter)
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func total(d durs) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return ms(sum)
}

// attribute sets the era of every grant: k when it was asked for and granted
// while the k-th master lived (from the death of the one before, to its
// kill), -1 when the request spans a kill or the era is unclean.
func (r *failoverRun) attribute() {
	n := len(r.failovers)
	for _, g := range r.grants {
		for k := 0; k <= n; k++ {
			from, to := r.began, r.ended.Add(time.Hour)
			if k > 0 {
				from = r.failovers[k-1].dead
			}
			if k < n {
				to = r.failovers[k].kill
			}
			if !r.unclean[k] && g.start.After(from) && g.got.Before(to) {
				g.era = k
				break
			}
		}
	}
}

// lastKill returns the index of the last failover whose kill came before at,
// -1 for none.
func (r *failoverRun) lastKill(at time.Time) int {
	k := -1
	for i, f := range r.failovers {
		if f.kill.Before(at) {
			k = i
		}
	}
	return k
}

// firstKillAfter returns the index of the first failover whose kill came
// after at, -1 for none: the failover that lost what was granted at at.
func (r *failoverRun) firstKillAfter(at time.Time) int {
	for i, f := range r.failovers {
		if f.kill.After(at) {
			return i
		}
	}
	return -1
}

// endOf is until when g's holder believed it held the lock.
func (r *failoverRun) endOf(g *foGrant) time.Time {
	if !g.ended {
		return r.ended
	}
	return g.end
}

// foOverlaps counts pairs of grants of one lock whose holders believed they
// held it at the same time.
type foOverlaps struct {
	same, cross, unknown int
	longest              time.Duration
}

func (r *failoverRun) overlaps(byLock map[string][]*foGrant) foOverlaps {
	var ov foOverlaps
	for _, gs := range byLock {
		for i, a := range gs {
			for _, b := range gs[i+1:] {
				if !b.got.Before(r.endOf(a)) {
					break
				}
				end := r.endOf(a)
				if e := r.endOf(b); e.Before(end) {
					end = e
				}
				d := end.Sub(b.got)
				ov.longest = max(ov.longest, d)
				if k := r.firstKillAfter(a.got); k >= 0 {
					r.failovers[k].overlaps++
				}
				switch {
				case a.era >= 0 && a.era == b.era:
					ov.same++
					expect(r.t, false, "%s: grants with tokens %d and %d (children %d and %d) overlap for %v, both granted by the primary of era %d; first: %s",
						a.lock, a.token, b.token, a.proc, b.proc, ms(d), a.era, r.describe(a, b))
				case a.era >= 0 && b.era >= 0:
					ov.cross++
				default:
					ov.unknown++
				}
			}
		}
	}
	return ov
}

// describe says how a and b, overlapping grants, began and ended, relative
// to a's start and to the failovers.
func (r *failoverRun) describe(a, b *foGrant) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return ms(t.Sub(a.start)).String()
	}
	one := func(g *foGrant) string {
		return fmt.Sprintf("child %d asked at %s, got at %s (lease %v), ended at %s (%s %q, told %s, release took %v)",
			g.proc, at(g.start), at(g.got), g.lease, at(r.endOf(g)), g.how, g.cause, at(g.told), ms(g.rel))
	}
	var kills []string
	for _, f := range r.failovers {
		if f.kill.After(a.start.Add(-10*time.Second)) && f.kill.Before(r.endOf(b).Add(10*time.Second)) {
			kills = append(kills, fmt.Sprintf("kill %s promoted %s dead %s", at(f.kill), at(f.promoted), at(f.dead)))
		}
	}
	return one(a) + "; second: " + one(b) + "; failovers near: " + strings.Join(kills, ", ")
}

// tokens counts the tokens issued twice and those below one issued before,
// and checks that the tokens one primary issued increase.
func (r *failoverRun) tokens(byLock map[string][]*foGrant) (repeated, backwards int) {
	for name, gs := range byLock {
		seen := make(map[uint64]*foGrant)
		lastInEra := make(map[int]*foGrant)
		var top *foGrant
		for _, g := range gs {
			if p := seen[g.token]; p != nil {
				repeated++
				if k := r.firstKillAfter(p.got); k >= 0 {
					r.failovers[k].repeated++
				}
				expect(r.t, p.era < 0 || p.era != g.era, "%s: token %d issued twice by the primary of era %d", name, g.token, g.era)
			}
			seen[g.token] = g
			if top != nil && g.token < top.token {
				backwards++
				if k := r.firstKillAfter(top.got); k >= 0 {
					r.failovers[k].backwards++
				}
			}
			if top == nil || g.token > top.token {
				top = g
			}
			if g.era >= 0 {
				if p := lastInEra[g.era]; p != nil {
					expect(r.t, g.token > p.token, "%s: token %d granted after %d by the primary of era %d: tokens must increase", name, g.token, p.token, g.era)
				}
				lastInEra[g.era] = g
			}
		}
	}
	return repeated, backwards
}

// holderStats are what the holders of one lease saw at the kills.
type holderStats struct {
	holders, told, kept, lostAtRelease, releaseFailed int
	toldAfter, releaseTook                            durs
	causes                                            map[string]int // of the losses told
}

// holders classifies the grants held when a master was killed, by lease and
// by how they ended, and checks that a holder told of the loss was told
// within its lease.
func (r *failoverRun) holders() map[time.Duration]*holderStats {
	byLease := make(map[time.Duration]*holderStats)
	for _, lease := range failoverLeases {
		byLease[lease] = &holderStats{causes: make(map[string]int)}
	}
	for k, f := range r.failovers {
		for _, g := range r.grants {
			if !g.got.Before(f.kill) || !r.endOf(g).After(f.kill) {
				continue
			}
			h := byLease[g.lease]
			if h == nil {
				h = &holderStats{causes: make(map[string]int)}
				byLease[g.lease] = h
			}
			f.holders++
			h.holders++
			switch {
			case g.how == "lost" && r.lastKill(g.told) == k:
				f.told++
				h.told++
				d := g.told.Sub(f.kill)
				h.toldAfter = append(h.toldAfter, d)
				h.causes[g.cause]++
				expect(r.t, d <= g.lease+time.Second, "%s: the holder of token %d was told %v after the kill (%s): later than its lease (%v)",
					g.lock, g.token, ms(d), g.cause, g.lease)
			case g.how == "lost" || g.how == "released":
				f.kept++ // renewed or released on the new master: its record survived
				h.kept++
			case g.how == "lost-at-release":
				f.lostAtRelease++
				h.lostAtRelease++
			case g.how == "release-error":
				if len(h.releaseTook) == 0 {
					r.t.Logf("Release failed (lease %v), first seen: %s", g.lease, g.cause)
				}
				f.releaseFailed++
				h.releaseFailed++
				h.releaseTook = append(h.releaseTook, g.rel)
			}
		}
	}
	return byLease
}

// ghostsSurvived counts, for each failover, the ghost entries of its
// snapshot that the next snapshot still finds.
func (r *failoverRun) ghostsSurvived() {
	for k, f := range r.failovers {
		next := r.lastGhosts
		if k+1 < len(r.failovers) {
			next = r.failovers[k+1].ghosts
		}
		for _, e := range f.ghosts {
			if slices.Contains(next, e) {
				f.ghostsSurvived++
			}
		}
	}
}

// waiters classifies the acquisitions under way when a master was killed
// (and ended before the next kill): granted in the same call (how long after
// the promotion), or failed (how long after the kill).
func (r *failoverRun) waiters() (resumedAfter, failedAfter durs) {
	for k, f := range r.failovers {
		for _, g := range r.grants {
			if g.start.Before(f.kill) && r.lastKill(g.got) == k {
				f.waiters++
				f.resumed++
				resumedAfter = append(resumedAfter, g.got.Sub(f.promoted))
			}
		}
		for _, e := range r.errs {
			if e.start.Before(f.kill) && r.lastKill(e.at) == k {
				f.waiters++
				f.failed++
				failedAfter = append(failedAfter, e.at.Sub(f.kill))
			}
		}
	}
	return resumedAfter, failedAfter
}

// nextGrants finds, for every failover and lock, the first grant after the
// kill, and checks that it came within failoverGrantBound of the promotion.
func (r *failoverRun) nextGrants(byLock map[string][]*foGrant) {
	for _, f := range r.failovers {
		for i := range failoverLocks {
			name := "failover-" + strconv.Itoa(i)
			j := slices.IndexFunc(byLock[name], func(g *foGrant) bool { return g.got.After(f.dead) })
			if !expect(r.t, j >= 0, "failover %d: %s never granted after the kill", f.n, name) {
				continue
			}
			d := byLock[name][j].got.Sub(f.promoted)
			f.nextGrant = append(f.nextGrant, d)
			expect(r.t, d <= failoverGrantBound, "failover %d: %s first granted %v after the promotion, want within %v", f.n, name, ms(d), failoverGrantBound)
		}
	}
}

// checkChildren checks the children's last reports: no goroutine left after
// Close, and every grant reported.
func (r *failoverRun) checkChildren() {
	expect(r.t, len(r.dones) == len(r.children), "%d of %d children reported done", len(r.dones), len(r.children))
	var grants int64
	for i, d := range r.dones {
		expect(r.t, d["leak"] == "", "child %d: goroutines left after Close: %s", i, d["leak"])
		grants += int64(parseU(d["grants"]))
	}
	expect(r.t, grants == int64(len(r.grants)), "children counted %d grants, reported %d", grants, len(r.grants))
}

// errorKind names the cause of a failed Acquire.
func errorKind(msg string) string {
	for _, k := range []struct{ sub, kind string }{
		{"wait timed out", "wait timed out (MaxWait)"},
		{"connection refused", "connection refused"},
		{"READONLY", "READONLY"},
		{"i/o timeout", "i/o timeout"},
		{"deadline exceeded", "deadline exceeded"},
		{"EOF", "EOF"},
		{"connection reset", "connection reset"},
		{"broken pipe", "broken pipe"},
		{"sentinels", "no sentinel answered"},
		{"not replicated", "not replicated (WaitForReplicas)"},
	} {
		if strings.Contains(msg, k.sub) {
			return k.kind
		}
	}
	return "other"
}

// summary prints the totals, and checks what is left.
func (r *failoverRun) summary(ov foOverlaps, repeated, backwards int, holders map[time.Duration]*holderStats, resumedAfter, failedAfter durs) {
	var waiters, resumed, failed, ghosts, survived int
	var next, promoted, stable durs
	byMode := map[string][4]int{}
	for _, f := range r.failovers {
		waiters, resumed, failed = waiters+f.waiters, resumed+f.resumed, failed+f.failed
		ghosts, survived = ghosts+len(f.ghosts), survived+f.ghostsSurvived
		next = append(next, f.nextGrant...)
		promoted, stable = append(promoted, f.promoted.Sub(f.kill)), append(stable, f.stable.Sub(f.kill))
		m := byMode[f.mode]
		byMode[f.mode] = [4]int{m[0] + 1, m[1] + f.overlaps, m[2] + f.repeated, m[3] + f.backwards}
	}
	r.say("totals over %d failovers in %v: %d grants, %d failed Acquire calls; the sentinels moved the master on their own %d times",
		len(r.failovers), ms(r.ended.Sub(r.began)), len(r.grants), len(r.errs), len(r.unclean))
	r.say("promotion: a sentinel reported the new master %v after the kill; the old master was back as a replica %v after it", promoted, stable)
	for _, lease := range failoverLeases {
		h := holders[lease]
		r.say("holders at a kill, lease %v: %d; told (Done closed) %d, %v after the kill (%v); kept the lock (its record was on the new master) %d; released within the lease, Release found the record gone or taken %d; Release failed %d (it took %v)",
			lease, h.holders, h.told, h.toldAfter, h.causes, h.kept, h.lostAtRelease, h.releaseFailed, h.releaseTook)
	}
	r.say("waiters at a kill: %d; granted in the same Acquire call %d, %v after the promotion; Acquire returned an error %d, %v after the kill",
		waiters, resumed, resumedAfter, failed, failedAfter)
	r.say("next grant of each lock after a promotion: %v", next)
	kinds, steady := r.errorKinds()
	r.say("failed Acquire calls by cause: %v; away from a failover: %d", kinds, steady)
	r.say("wait queues after a promotion: %d entries of acquisitions that had ended (their Leave failed during the outage, or was lost with the master), %d of them still queued at the next promotion; %d at the end",
		ghosts, survived, len(r.lastGhosts))
	r.say("idle locks: a lock granted to an acquisition that had failed already (a waiter that gave up, whose Leave failed) stayed idle %v, total %v; a record left by a hold that had ended (its Release failed, or was lost with the master) %v, total %v",
		r.idle["ghost"], total(r.idle["ghost"]), r.idle["stale"], total(r.idle["stale"]))
	r.say("overlaps: %d pairs of grants held at once: same primary %d, across a failover %d, unattributed (a request spanning a kill) %d; longest %v",
		ov.same+ov.cross+ov.unknown, ov.same, ov.cross, ov.unknown, ms(ov.longest))
	r.say("tokens: %d issued twice, %d below one issued before", repeated, backwards)
	for _, mode := range []string{"sync", "lag"} {
		m := byMode[mode]
		r.say("mode %s: %d failovers, %d overlaps, %d tokens issued twice, %d below one issued before (each counted at the failover after the earlier grant)",
			mode, m[0], m[1], m[2], m[3])
	}
	var w foWrites
	for _, g := range r.grants {
		w = foWrites{w.writes + g.writes, w.rejected + g.rejected, w.dup + g.dup, w.errors + g.writeErrors}
	}
	r.say("fenced writes: %d; rejected as stale %d; accepted with a token another holder also had %d; failed %d", w.writes, w.rejected, w.dup, w.errors)
	expect(r.t, w.errors == 0, "%d fenced writes to the resource failed", w.errors)
}

// errorKinds counts the failed Acquire calls by cause, and those that failed
// away from a failover (logging the first few).
func (r *failoverRun) errorKinds() (map[string]int, int) {
	kinds := make(map[string]int)
	steady := 0
	for _, e := range r.errs {
		kind := errorKind(e.err)
		if kinds[kind] == 0 {
			r.t.Logf("Acquire failed (%s), first seen: %s", kind, e.err)
		}
		kinds[kind]++
		if !r.nearFailover(e.at) {
			steady++
			if steady <= 3 {
				r.t.Logf("Acquire failed away from a failover: %s", e.err)
			}
		}
	}
	return kinds, steady
}

// nearFailover reports whether at falls between a kill and two seconds after
// the deployment was stable again.
func (r *failoverRun) nearFailover(at time.Time) bool {
	for _, f := range r.failovers {
		if at.After(f.kill) && at.Before(f.stable.Add(2*time.Second)) {
			return true
		}
	}
	return false
}

// foResource is the fenced resource of the children: it keeps, per lock, the
// highest token written and who wrote it, and refuses a lower token. It
// returns 1 when the write is accepted, 0 when it is rejected as stale, and 2
// when it is accepted with the token of another holder (a token issued
// twice: fencing cannot tell the two holders apart).
var foResource = redis.NewScript(`
local cur = redis.call('GET', KEYS[1]) or '0'
local tok = ARGV[1]
if #tok < #cur or (#tok == #cur and tok < cur) then return 0 end
local r = 1
if tok == cur and redis.call('GET', KEYS[2]) ~= ARGV[2] then r = 2 end
redis.call('SET', KEYS[1], tok)
redis.call('SET', KEYS[2], ARGV[2])
return r
`)

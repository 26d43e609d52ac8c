package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/seed05627090/lock"
)

// command runs the commands of lockctl on a Client, and on its provider
// for what the Client does not do (releasing one claim of a counted name).
type command struct {
	client   *lock.Client
	provider lock.Provider
	log      *slog.Logger // the Client's: warnings to stderr
	prefix   string
	where    string // where the provider keeps the locks: "in Redis", "in the tables public.lock_*"
	hint     string // what ls says when it finds no lock: see emptyListHint
	json     bool   // print JSON rather than text
	stdout   io.Writer
	stderr   io.Writer
}

// list prints the locks under the prefix that are held or in a grace
// period, and the semaphores and read-write locks that are held or waited
// for, one row each, at most limit of them, and says on stderr when there
// were more.
func (c command) list(ctx context.Context, limit int) error {
	locks, more, err := c.client.List(ctx, limit)
	if err != nil {
		return err
	}
	if more {
		fmt.Fprintf(c.stderr, "lockctl: more than %d locks; showing %d; use -limit\n", limit, len(locks))
	}
	now := time.Now()
	if c.json {
		out := make([]lockJSON, 0, len(locks))
		for _, s := range locks {
			out = append(out, toJSON(s, true))
		}
		return c.printJSON(out)
	}
	if len(locks) == 0 {
		_, err := fmt.Fprintf(c.stdout, "no locks under the prefix %q %s (keys %s)\n%s\n",
			c.prefix, c.where, c.client.Key("NAME"), c.hint)
		return err
	}
	kinds := false // a column for what the entries are, when some are not plain locks
	for _, s := range locks {
		kinds = kinds || s.Kind != "" || counted(s)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	head := "NAME\tOWNER\tTOKEN\tSINCE\tEXPIRES\tSTATE\tWAITERS"
	if kinds {
		head += "\tKIND"
	}
	fmt.Fprintln(tw, head)
	for _, s := range locks {
		switch {
		case s.Err != nil:
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\t-", s.Name, state(s))
		case counted(s):
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t%s\t%s\t%d",
				s.Name, holders(len(s.Holders)), left(lastUntil(s), now), state(s), s.Waiters)
		default:
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d",
				s.Name, holder(s), s.Token, age(s.Since, now), left(s.Until, now), state(s), s.Waiters)
		}
		if kinds {
			fmt.Fprintf(tw, "\t%s", kindOf(s))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// show prints the lock called name in detail, or that it is free; or, when
// no lock of that name is held, the semaphore or read-write lock of that
// name.
func (c command) show(ctx context.Context, name string) error {
	s, err := c.client.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(toJSON(s, true))
	}
	if counted(s) {
		return c.showCounted(s)
	}
	if s.Free() {
		_, err := fmt.Fprintf(c.stdout, "lock %q (key %s) is free\n", s.Name, s.Key)
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", s.Name)
	fmt.Fprintf(tw, "key:\t%s\n", s.Key)
	fmt.Fprintf(tw, "state:\t%s\n", state(s))
	fmt.Fprintf(tw, "owner:\t%s\n", s.Owner)
	fmt.Fprintf(tw, "identity:\t%s\n", orNone(s.Identity))
	fmt.Fprintf(tw, "token:\t%d\n", s.Token)
	fmt.Fprintf(tw, "since:\t%s (%s)\n", timestamp(s.Since), age(s.Since, now))
	fmt.Fprintf(tw, "until:\t%s\n", timestamp(s.Until))
	fmt.Fprintf(tw, "time left:\t%s\n", left(s.Until, now))
	fmt.Fprintf(tw, "waiters:\t%d\n", s.Waiters)
	fmt.Fprintf(tw, "kind:\t%s\n", kindOf(s))
	return tw.Flush()
}

// showCounted prints the semaphore or read-write lock s: its limit, what
// is held of it, its holders and its queue.
func (c command) showCounted(s lock.Status) error {
	now := time.Now()
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", s.Name)
	fmt.Fprintf(tw, "key:\t%s\n", s.Key)
	fmt.Fprintf(tw, "kind:\t%s\n", countedKind(s))
	fmt.Fprintf(tw, "state:\t%s\n", state(s))
	fmt.Fprintf(tw, "used:\t%s\n", used(s))
	fmt.Fprintf(tw, "holders:\t%d\n", len(s.Holders))
	fmt.Fprintf(tw, "waiters:\t%d\n", s.Waiters)
	if err := tw.Flush(); err != nil {
		return err
	}
	// The holders' table and the queue's, each under an empty line when it
	// has a row; the third column, KIND (reader or writer), for a
	// read-write lock alone.
	holders := [][]string{{"HOLDER", "IDENTITY", "KIND", "WEIGHT", "TOKEN", "SINCE", "UNTIL", "TIME LEFT"}}
	for _, h := range s.Holders {
		holders = append(holders, []string{h.Owner, orDash(h.Identity), h.Kind, strconv.Itoa(h.Weight),
			strconv.FormatUint(h.Token, 10), age(h.Since, now), timestamp(h.Until), left(h.Until, now)})
	}
	queue := [][]string{{"QUEUED", "IDENTITY", "KIND", "WEIGHT"}}
	for _, q := range s.Queue {
		queue = append(queue, []string{q.Owner, orDash(q.Identity), q.Kind, strconv.Itoa(q.Weight)})
	}
	for _, table := range [][][]string{holders, queue} {
		if len(table) == 1 {
			continue
		}
		fmt.Fprintln(c.stdout)
		for _, row := range table {
			if s.Kind != "rwmutex" {
				row = slices.Delete(row, 2, 3)
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// release frees the lock called name whoever holds it, and prints what it
// found. The Client logs the forced release to stderr. A semaphore or a
// read-write lock is not released whole: release says so, and names the
// way to release one of its holds (releaseHold).
func (c command) release(ctx context.Context, name string) error {
	s, err := c.client.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if counted(s) {
		return fmt.Errorf("%q is a %s, not a lock: release frees a lock only, and released nothing. "+
			"To free one of its holds, give its holder's owner, as lockctl show NAME lists it: lockctl -yes release NAME OWNER",
			s.Name, countedKind(s))
	}
	s, err = c.client.ForceRelease(ctx, name)
	if err != nil {
		return err
	}
	if c.json {
		out := toJSON(s, false) // ForceRelease does not count the waiters
		released := !s.Free()
		out.Released = &released
		return c.printJSON(out)
	}
	switch {
	case s.Free():
		_, err = fmt.Fprintf(c.stdout, "lock %q (key %s) was free: nothing released\n", s.Name, s.Key)
	case s.GracePeriod:
		_, err = fmt.Fprintf(c.stdout, "ended the grace period of lock %q (key %s): owner %s, token %d, held since %s\n",
			s.Name, s.Key, s.Owner, s.Token, timestamp(s.Since))
	default:
		_, err = fmt.Fprintf(c.stdout, "released lock %q (key %s): owner %s, token %d, held since %s; "+
			"the holder learns it lost the lock at its next renewal\n",
			s.Name, s.Key, s.Owner, s.Token, timestamp(s.Since))
	}
	return err
}

// releaseHold frees the hold of owner on the semaphore or read-write lock
// called name (Provider.ReleaseClaim), whoever holds it, and prints what it
// freed; its waiters that now fit are served. It is logged to stderr.
func (c command) releaseHold(ctx context.Context, name, owner string) error {
	s, err := c.client.Inspect(ctx, name)
	if err != nil {
		return err
	}
	switch {
	case !counted(s) && !s.Free():
		return fmt.Errorf("%q is a lock, not a semaphore or a read-write lock: release NAME OWNER frees one of their holds, "+
			"and released nothing; to free a lock, give no owner: lockctl -yes release NAME", s.Name)
	case !counted(s):
		return fmt.Errorf("no semaphore or read-write lock %q (key %s) is held or waited for: nothing released", s.Name, s.Key)
	}
	i := slices.IndexFunc(s.Holders, func(h lock.Status) bool { return h.Owner == owner })
	if i < 0 {
		return fmt.Errorf("%s %q (key %s) has no holder %q: lockctl show NAME lists its holders",
			countedKind(s), s.Name, s.Key, owner)
	}
	h := s.Holders[i]
	if err := c.provider.ReleaseClaim(ctx, s.Key, owner); err != nil {
		return fmt.Errorf("releasing the hold %q of %q: %w", owner, s.Name, err)
	}
	c.log.Warn("lock: forced release of a hold", "key", s.Key, "owner", owner, "weight", h.Weight, "token", h.Token, "since", h.Since)
	if c.json {
		out := toJSON(h, false)
		released := true
		out.Released = &released
		return c.printJSON(out)
	}
	_, err = fmt.Fprintf(c.stdout, "released the hold of %s on %q (key %s), a %s: weight %d, token %d, held since %s; "+
		"its waiters that fit are served, and the holder learns it lost its hold at its next renewal\n",
		owner, s.Name, s.Key, countedKind(s), h.Weight, h.Token, timestamp(h.Since))
	return err
}

// printJSON prints v as indented JSON.
func (c command) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// lockJSON is a lock.Status as -json prints it: times as RFC 3339 text
// (empty when unknown), the state spelled out, and the error of a corrupt
// entry as text. A semaphore or a read-write lock has Kind, Limit, Used,
// Holders and Queue, and no Owner.
type lockJSON struct {
	Name        string     `json:"name"`
	Key         string     `json:"key"`
	State       string     `json:"state"` // held, grace period, waited for (a semaphore's or read-write lock's waiters alone), free or corrupt
	Owner       string     `json:"owner,omitempty"`
	Identity    string     `json:"identity,omitempty"`
	Token       uint64     `json:"token,omitempty"`
	Since       string     `json:"since,omitempty"`
	Until       string     `json:"until,omitempty"`
	GracePeriod bool       `json:"grace_period"`
	Waiters     *int       `json:"waiters,omitempty"`  // nil for release
	Error       string     `json:"error,omitempty"`    // for a corrupt entry
	Released    *bool      `json:"released,omitempty"` // set by release alone
	Kind        string     `json:"kind,omitempty"`     // semaphore, rwmutex, permit, reader, writer or role: see lock.Status.Kind
	Of          string     `json:"of,omitempty"`
	Limit       int        `json:"limit,omitempty"`
	Weight      int        `json:"weight,omitempty"` // of a hold
	Used        *int       `json:"used,omitempty"`   // of a semaphore or a read-write lock
	Holders     []holdJSON `json:"holders,omitempty"`
	Queue       []holdJSON `json:"queue,omitempty"`
}

// holdJSON is a hold of a semaphore or a read-write lock, or a waiter of
// its queue (which has no token and no times), as -json prints it.
type holdJSON struct {
	Owner    string `json:"owner"`
	Identity string `json:"identity,omitempty"`
	Kind     string `json:"kind,omitempty"` // permit, reader or writer
	Weight   int    `json:"weight"`
	Token    uint64 `json:"token,omitempty"`
	Since    string `json:"since,omitempty"`
	Until    string `json:"until,omitempty"`
}

// kindOf says what s is, for ls's KIND column and show's kind line:
// "semaphore 2/3 permits", "rwmutex 3/16 readers", "rwmutex 16/16 writer",
// "election role"; for a hold of one, "permit of pool (3 permits)",
// "reader of doc (at most 16 readers)", "writer of doc"; "lock" for a
// plain lock. A name is one kind at a time (lock.Kind): the kind is the
// one its store keeps.
func kindOf(s lock.Status) string {
	if counted(s) {
		switch s.Kind {
		case "semaphore":
			return fmt.Sprintf("semaphore %d/%d permits", s.Used, s.Limit)
		case "rwmutex":
			if writing(s) {
				return fmt.Sprintf("rwmutex %d/%d writer", s.Used, s.Limit)
			}
			return fmt.Sprintf("rwmutex %d/%d readers", s.Used, s.Limit)
		}
		return fmt.Sprintf("counted %d/%d", s.Used, s.Limit)
	}
	switch s.Kind {
	case "":
		return "lock"
	case "permit":
		return fmt.Sprintf("permit of %s (%d permits)", s.Of, s.Limit)
	case "reader":
		return fmt.Sprintf("reader of %s (at most %d readers)", s.Of, s.Limit)
	case "role":
		return "election role"
	}
	return s.Kind + " of " + s.Of
}

// counted reports whether s is a semaphore or a read-write lock as a whole
// (Inspect and List return one when no lock of its name is held).
func counted(s lock.Status) bool { return s.Err == nil && s.Owner == "" && s.Limit > 0 }

// countedKind names the counted name s with its limit: "semaphore (3
// permits)", "read-write lock (at most 16 readers)".
func countedKind(s lock.Status) string {
	switch s.Kind {
	case "semaphore":
		return fmt.Sprintf("semaphore (%d permits)", s.Limit)
	case "rwmutex":
		return fmt.Sprintf("read-write lock (at most %d readers)", s.Limit)
	}
	return fmt.Sprintf("counted name (limit %d)", s.Limit)
}

// used says what is held of the counted name s: "2 of 3 permits held", "3
// of 16 readers", "a writer".
func used(s lock.Status) string {
	switch {
	case s.Kind == "semaphore":
		return fmt.Sprintf("%d of %d permits held", s.Used, s.Limit)
	case s.Kind == "rwmutex" && writing(s):
		return "a writer"
	case s.Kind == "rwmutex":
		return fmt.Sprintf("%d of %d readers", s.Used, s.Limit)
	}
	return fmt.Sprintf("%d of %d held", s.Used, s.Limit)
}

// writing reports whether a writer holds the read-write lock s.
func writing(s lock.Status) bool {
	return slices.ContainsFunc(s.Holders, func(h lock.Status) bool { return h.Kind == "writer" })
}

// holders says how many holders there are: "1 holder", "3 holders".
func holders(n int) string {
	if n == 1 {
		return "1 holder"
	}
	return strconv.Itoa(n) + " holders"
}

// lastUntil returns the latest Until of s's holders: when the last of
// their leases runs out unless renewed; zero when there are none.
func lastUntil(s lock.Status) time.Time {
	var t time.Time
	for _, h := range s.Holders {
		if h.Until.After(t) {
			t = h.Until
		}
	}
	return t
}

// toJSON returns s as -json prints it, with its waiters when withWaiters.
func toJSON(s lock.Status, withWaiters bool) lockJSON {
	out := lockJSON{
		Name:        s.Name,
		Key:         s.Key,
		State:       "free",
		Owner:       s.Owner,
		Identity:    s.Identity,
		Token:       s.Token,
		Since:       jsonTime(s.Since),
		Until:       jsonTime(s.Until),
		GracePeriod: s.GracePeriod,
		Kind:        s.Kind,
		Of:          s.Of,
		Limit:       s.Limit,
		Weight:      s.Weight,
	}
	if counted(s) {
		n := s.Used
		out.Used = &n
		for _, h := range s.Holders {
			out.Holders = append(out.Holders, holdJSON{Owner: h.Owner, Identity: h.Identity, Kind: h.Kind, Weight: h.Weight,
				Token: h.Token, Since: jsonTime(h.Since), Until: jsonTime(h.Until)})
		}
		for _, q := range s.Queue {
			out.Queue = append(out.Queue, holdJSON{Owner: q.Owner, Identity: q.Identity, Kind: q.Kind, Weight: q.Weight})
		}
	}
	switch {
	case s.Err != nil:
		out.State, out.Error = "corrupt", s.Err.Error()
	case s.GracePeriod:
		out.State = "grace period"
	case !s.Free():
		out.State = "held"
	case counted(s):
		out.State = "waited for"
	}
	if withWaiters && s.Err == nil {
		n := s.Waiters
		out.Waiters = &n
	}
	return out
}

func jsonTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

// state says whether s is held, in a grace period, waited for (a
// semaphore or read-write lock that holds only waiters: in use all the
// same, no lock can take its name), free or corrupt.
func state(s lock.Status) string {
	switch {
	case s.Err != nil:
		var rerr *lock.RecordError
		if errors.As(s.Err, &rerr) {
			return "corrupt: value " + strconv.Quote(short(rerr.Value)) // its key is the row's
		}
		return "corrupt: " + s.Err.Error()
	case s.GracePeriod:
		return "grace period"
	case !s.Free():
		return "held"
	case counted(s):
		return "waited for"
	}
	return "free"
}

// short cuts s to 32 bytes or so.
func short(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// holder returns the identity of s's holder when it has one, else its
// owner id.
func holder(s lock.Status) string {
	if s.Identity != "" {
		return s.Identity
	}
	return s.Owner
}

// age says how long before now t was, to the second: "12s ago".
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String() // the granting clock is ahead of ours
	}
	return d.String() + " ago"
}

// left says how long after now t is, to a tenth of a second: "14.2s".
func left(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(100 * time.Millisecond)
	if d <= 0 {
		return "expired"
	}
	return d.String()
}

// timestamp returns t in RFC 3339, or "-" when unknown.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// orNone returns s, or "(none)" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/seed05627090/lock"
)

// command runs the commands of lockctl on a Client.
type command struct {
	client *lock.Client
	prefix string
	where  string // where the provider keeps the locks: "in Redis", "in the tables public.lock_*"
	hint   string // what ls says when it finds no lock: see emptyListHint
	json   bool   // print JSON rather than text
	stdout io.Writer
	stderr io.Writer
}

// list prints the locks under the prefix that are held or in a grace
// period, at most limit of them, and says on stderr when there were more.
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
	parts := false // a column for what locks are part of, when some are
	for _, s := range locks {
		parts = parts || s.Kind != ""
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	head := "NAME\tOWNER\tTOKEN\tSINCE\tEXPIRES\tSTATE\tWAITERS"
	if parts {
		head += "\tPART"
	}
	fmt.Fprintln(tw, head)
	for _, s := range locks {
		if s.Err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\t-\n", s.Name, state(s))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d",
			s.Name, holder(s), s.Token, age(s.Since, now), left(s.Until, now), state(s), s.Waiters)
		if parts {
			fmt.Fprintf(tw, "\t%s", partOf(s))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// show prints the lock called name in detail, or that it is free.
func (c command) show(ctx context.Context, name string) error {
	s, err := c.client.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if c.json {
		return c.printJSON(toJSON(s, true))
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
	switch s.Kind {
	case "":
	case "role":
		fmt.Fprintf(tw, "kind:\t%s\n", partOf(s))
	default:
		fmt.Fprintf(tw, "part of:\t%s\n", partOf(s))
	}
	return tw.Flush()
}

// release frees the lock called name whoever holds it, and prints what it
// found. The Client logs the forced release to stderr.
func (c command) release(ctx context.Context, name string) error {
	s, err := c.client.ForceRelease(ctx, name)
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

// printJSON prints v as indented JSON.
func (c command) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// lockJSON is a lock.Status as -json prints it: times as RFC 3339 text
// (empty when unknown), the state spelled out, and the error of a corrupt
// entry as text.
type lockJSON struct {
	Name        string `json:"name"`
	Key         string `json:"key"`
	State       string `json:"state"` // held, grace period, free or corrupt
	Owner       string `json:"owner,omitempty"`
	Identity    string `json:"identity,omitempty"`
	Token       uint64 `json:"token,omitempty"`
	Since       string `json:"since,omitempty"`
	Until       string `json:"until,omitempty"`
	GracePeriod bool   `json:"grace_period"`
	Waiters     *int   `json:"waiters,omitempty"`  // nil for release
	Error       string `json:"error,omitempty"`    // for a corrupt entry
	Released    *bool  `json:"released,omitempty"` // set by release alone
	Kind        string `json:"kind,omitempty"`     // permit, reader, writer, gate or role: see lock.Status.Kind
	Of          string `json:"of,omitempty"`
	Limit       int    `json:"limit,omitempty"`
}

// partOf says what s is part of: "permit of pool (3 permits)", "reader of
// doc (at most 16 readers)", "writer of doc", "gate of pool", "election
// role"; "-" for a plain lock.
func partOf(s lock.Status) string {
	switch s.Kind {
	case "":
		return "-"
	case "permit":
		return fmt.Sprintf("permit of %s (%d permits)", s.Of, s.Limit)
	case "reader":
		return fmt.Sprintf("reader of %s (at most %d readers)", s.Of, s.Limit)
	case "role":
		return "election role"
	}
	return s.Kind + " of " + s.Of
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
	}
	switch {
	case s.Err != nil:
		out.State, out.Error = "corrupt", s.Err.Error()
	case s.GracePeriod:
		out.State = "grace period"
	case !s.Free():
		out.State = "held"
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

// state says whether s is held, in a grace period, free or corrupt.
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

// orNone returns s, or "(none)" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

package postgres

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/seed05627090/lock"
)

func TestUpperBound(t *testing.T) {
	str := func(s string) *string { return &s }
	cases := []struct {
		prefix string
		want   *string
	}{
		{"", nil},
		{"a", str("b")},
		{"lock:{x", str("lock:{y")},
		{"a%_", str("a%`")},
		{"é", str("ê")},
		{"a\u007f", str("a\u0080")},
		{"a\ud7ff", str("a\ue000")},
		{"a\U0010ffff", str("b")},
		{"\U0010ffff", nil},
	}
	for _, c := range cases {
		got := upperBound(c.prefix)
		if c.want == nil {
			assert.Nil(t, got, "prefix %q has no upper bound", c.prefix)
			continue
		}
		if assert.NotNil(t, got, "prefix %q", c.prefix) {
			assert.Equal(t, *c.want, *got, "prefix %q", c.prefix)
			assert.Greater(t, *got, c.prefix+"\U0010ffff", "every key with prefix %q sorts before the bound", c.prefix)
		}
	}
}

func TestChannel(t *testing.T) {
	short := strings.Repeat("i", maxChannelLen)
	assert.Equal(t, short, channel(short), "an inbox that fits a channel name is the channel")
	long := short + "x"
	assert.LessOrEqual(t, len(channel(long)), maxChannelLen)
	assert.Equal(t, channel(long), channel(long), "the same inbox, the same channel")
	assert.NotEqual(t, channel(long), channel(short+"y"), "other inboxes, other channels")
}

func TestParseGrant(t *testing.T) {
	g, ok := parseGrant(`{"k":"lock:{a}","o":"o-1","t":42,"ttl":1500}`)
	assert.True(t, ok)
	assert.Equal(t, lock.Notice{Key: "lock:{a}", Owner: "o-1", Token: 42, TTL: 1500 * time.Millisecond}, g)
	g, ok = parseGrant(`{"k":"sem:{a}","o":"o-2","t":43,"ttl":1500,"w":2}`)
	assert.True(t, ok)
	assert.Equal(t, lock.Notice{Key: "sem:{a}", Owner: "o-2", Token: 43, TTL: 1500 * time.Millisecond, Weight: 2}, g, "a claim's grant")
	g, ok = parseGrant(`{"k":"lock:{a}"}`)
	assert.True(t, ok)
	assert.Equal(t, lock.Notice{Key: "lock:{a}"}, g, "a grace period")
	for _, bad := range []string{"", "garbage", `{}`, `{"o":"x","t":1,"ttl":1}`, `{"k":"a","o":"x","ttl":1}`,
		`{"k":"a","o":"x","t":1}`, `{"k":"a","o":"x","t":-1,"ttl":1}`, `{"k":"a","o":"x","t":1,"ttl":1,"w":-1}`, `["k"]`} {
		_, ok := parseGrant(bad)
		assert.False(t, ok, "payload %q is not a grant", bad)
	}
}

// Text a text column cannot hold (not UTF-8, or with a NUL byte) is refused
// in the key, the owner and the inbox, by every check that takes them, after
// the root's checks.
func TestCheckText(t *testing.T) {
	for _, bad := range []string{"a\xffb", "a\x00b"} {
		w := lock.Wait{Owner: "o", TTL: time.Second, Inbox: "i"}
		assert.ErrorIs(t, checkKey(bad), lock.ErrInvalidArgument, "checkKey(%q)", bad)
		assert.ErrorIs(t, checkKeyOwner(bad, "o"), lock.ErrInvalidArgument, "checkKeyOwner key %q", bad)
		assert.ErrorIs(t, checkKeyOwner("k", bad), lock.ErrInvalidArgument, "checkKeyOwner owner %q", bad)
		assert.ErrorIs(t, checkArgs(bad, "o", time.Second), lock.ErrInvalidArgument, "checkArgs key %q", bad)
		assert.ErrorIs(t, checkArgs("k", bad, time.Second), lock.ErrInvalidArgument, "checkArgs owner %q", bad)
		assert.ErrorIs(t, checkWait(bad, w), lock.ErrInvalidArgument, "checkWait key %q", bad)
		assert.ErrorIs(t, checkInbox(bad), lock.ErrInvalidArgument, "checkInbox(%q)", bad)
		w.Inbox = bad
		assert.ErrorIs(t, checkWait("k", w), lock.ErrInvalidArgument, "checkWait inbox %q", bad)
		w.Inbox, w.Owner = "i", bad
		assert.ErrorIs(t, checkWait("k", w), lock.ErrInvalidArgument, "checkWait owner %q", bad)
	}
	assert.ErrorContains(t, checkArgs("a\x00b", "o", time.Second), `lock key "a\x00b" contains a NUL byte`)
	assert.ErrorContains(t, checkArgs("", "o", time.Second), "empty lock name", "the root's checks come first")
	assert.NoError(t, checkWait("é", lock.Wait{Owner: "ö", TTL: time.Second, Inbox: "ï"}))
}

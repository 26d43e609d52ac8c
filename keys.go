package lock

// Keys: a lock called name is stored under the Client's prefix and the name in
// braces, one Redis Cluster hash tag, so that every key a provider derives
// from it (the Redis provider's queue, its fencing counter) can share its slot.

import (
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/seed05627090/lock/check"
)

// Key returns the key of the lock called name: the Client's prefix and the
// name in braces, a Redis Cluster hash tag ("lock:{name}"), so that the Redis
// provider stores the lock under this very key (see [RedisKeys]). A name with
// a brace of its own that would break the tag is kept whole, in parentheses,
// after a tag made from its checksum ("lock:{1y4akgc}(})"): such a key ends
// with ")", never "}", so it is the key of no other name.
func (c *Client) Key(name string) string {
	key := c.prefix + "{" + name + "}"
	if strings.ContainsAny(name, "{}") && !hasHashTag(key) {
		key = c.prefix + "{" + strconv.FormatUint(uint64(crcName(name)), 36) + "}(" + name + ")"
	}
	return key
}

// crcName is the checksum that stands for a name or key in a hash tag.
func crcName(s string) uint32 { return crc32.ChecksumIEEE([]byte(s)) }

// checkName returns the key of the lock called name, or why it is refused.
func (c *Client) checkName(name string) (string, error) {
	if name == "" {
		return "", invalidf("empty lock name")
	}
	key := c.Key(name)
	return key, check.Key(key)
}

// nameOf returns the name whose key (see Key) is key, and whether key is
// the key of a name under the Client's prefix at all.
func (c *Client) nameOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, c.prefix)
	if !ok || !strings.HasPrefix(rest, "{") {
		return "", false
	}
	var name string
	if tag, n, ok := strings.Cut(rest[1:], "}("); ok && strings.HasSuffix(n, ")") {
		name = n[:len(n)-1] // a name kept whole after a checksum tag
		if tag != "" && c.Key(name) == key {
			return name, true
		}
	}
	name = strings.TrimSuffix(rest[1:], "}")
	return name, name != "" && c.Key(name) == key
}

// hasHashTag reports whether Redis Cluster hashes key by a tag inside it (the
// text between its first "{" and the first "}" after it, when not empty), so
// that every key that starts with key shares its slot.
func hasHashTag(key string) bool {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(key[i+1:], '}')
	return j > 0
}

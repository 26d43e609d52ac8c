package lock

// Owners: the id of one acquisition, which the provider stores as the
// holder of a record, a claim or a queue entry. Its format, written and read
// here only:
//
//	[identity/]client-seq[~<kind><n>]
//
// identity is the Client's WithIdentity (none by default); client is the
// Client's random id; seq counts the Client's acquisitions, in base 36; the
// tag, ~<kind><n>, ends the owner of a Semaphore's, an RWMutex's or an
// election role's hold (see ownerTag), so that Inspect, List, lockctl and
// PartOf tell them apart from a lock's.

import (
	"strconv"
	"strings"
)

// ownersOf returns the start of every owner of a Client with the random
// id, and identity ("" for none): what newOwner adds a sequence number to.
// It fails for an identity that WithIdentity refuses.
func ownersOf(identity, id string) (string, error) {
	switch {
	case identity == "":
		return id, nil
	case len(identity) > MaxIdentityLen:
		return "", invalidf("identity is %d bytes, more than %d", len(identity), MaxIdentityLen)
	case strings.ContainsAny(identity, ", \t\r\n\v\f"):
		return "", invalidf("identity %q contains a comma or white space", identity)
	}
	return identity + "/" + id, nil
}

// newOwner returns a fresh owner, ending with tag ("" for a lock's).
func (c *Client) newOwner(tag string) string {
	var buf [128]byte // on the stack: the owner is the one allocation
	b := append(buf[:0], c.owners...)
	b = append(b, '-')
	b = strconv.AppendUint(b, c.seq.Add(1), 36)
	return string(append(b, tag...))
}

// owns reports whether owner is an acquisition of c.
func (c *Client) owns(owner string) bool {
	return len(owner) > len(c.owners) && strings.HasPrefix(owner, c.owners) && owner[len(c.owners)] == '-'
}

// identityOf returns the identity ([WithIdentity]) in owner, "" without one.
func identityOf(owner string) string {
	if i := strings.LastIndexByte(owner, '/'); i > 0 {
		return owner[:i]
	}
	return ""
}

// The kinds of tag (see [Status.Kind]): a semaphore's holders and waiters;
// an RWMutex's readers; its writers; a role's candidates and leader (n is
// 1).
const (
	tagPermit byte = 'n'
	tagReader byte = 'r'
	tagWriter byte = 'w'
	tagRole   byte = 'e'
)

// ownerTag returns the tag of kind for n: "~n4" ends the owners of a
// Semaphore(4)'s holds.
func ownerTag(kind byte, n int) string {
	return "~" + string(rune(kind)) + strconv.Itoa(n)
}

// roleTag ends the owner of a role's candidates and leader, so that Status
// (Kind "role"), lockctl and the otel module tell a role from a lock, and a
// role taken with Acquire, or a lock campaigned for, is refused (see
// roleMix).
var roleTag = ownerTag(tagRole, 1)

// parseTag returns the kind and number of the tag that ends owner, and
// whether it ends with one. It does not allocate.
func parseTag(owner string) (kind byte, n int, ok bool) {
	i := strings.LastIndexByte(owner, '~')
	if i < 0 || len(owner) < i+3 {
		return 0, 0, false
	}
	n, ok = number(owner[i+2:])
	if !ok || n < 1 {
		return 0, 0, false
	}
	return owner[i+1], n, true
}

// isRole reports whether owner is a role's candidate or leader.
func isRole(owner string) bool {
	kind, n, ok := parseTag(owner)
	return ok && kind == tagRole && n == 1
}

// number returns the value of s, decimal digits only (at most 9 of them),
// and whether it is one.
func number(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

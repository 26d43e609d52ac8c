package etcd

import (
	"context"
	"fmt"
	"math"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/check"
)

// Fence makes writes to etcd that a stale holder of a lock cannot make, as
// lock.RedisFence does on Redis: one transaction checks the fence key, whose
// value is the greatest fencing token that has passed it (its mark), and
// when the mark is at most token it writes token as the new mark and runs
// ops; otherwise it writes nothing and Fence returns a
// *lock.StaleTokenError (errors.Is(err, lock.ErrStaleToken)) with the mark.
// A token equal to the mark passes. It returns the responses of ops, in
// order.
//
//	_, err := etcd.Fence(ctx, cli, "invoice/7/fence", l.Token(),
//		clientv3.OpPut("invoice/7", data))
//
// The mark is stored as 20 decimal digits, so that etcd's byte-wise compare
// of values orders them as numbers. ops must not write the fence key. The
// token of any lock works (on any provider) as long as the writers of one
// resource take theirs from the same lock; a token of 0 is refused with
// lock.ErrInvalidArgument.
func Fence(ctx context.Context, kv clientv3.KV, fence string, token uint64, ops ...clientv3.Op) ([]*pb.ResponseOp, error) {
	switch {
	case kv == nil:
		return nil, check.Invalidf("nil etcd KV")
	case fence == "":
		return nil, check.Invalidf("empty fence key")
	case token == 0:
		return nil, check.Invalidf("fencing token 0")
	}
	then := append([]clientv3.Op{clientv3.OpPut(fence, markValue(token))}, ops...)
	passes := clientv3.Compare(clientv3.CreateRevision(fence), ">", 0) // every mark is at most MaxUint64
	if token < math.MaxUint64 {
		passes = clientv3.Compare(clientv3.Value(fence), "<", markValue(token+1))
	}
	resp, err := kv.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(fence), "=", 0)).
		Then(then...).
		Else(clientv3.OpTxn([]clientv3.Cmp{passes}, then, []clientv3.Op{clientv3.OpGet(fence)})).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("lock: etcd fence %q: %w", fence, err)
	}
	if resp.Succeeded {
		return resp.Responses[1:], nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.Succeeded {
		return inner.Responses[1:], nil
	}
	var mark uint64
	if kvs := inner.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if mark, err = strconv.ParseUint(string(kvs[0].Value), 10, 64); err != nil {
			return nil, &lock.RecordError{Key: fence, Value: string(kvs[0].Value)}
		}
	}
	return nil, &lock.StaleTokenError{Fence: fence, Token: token, Mark: mark}
}

// markValue is a fence's mark: 20 digits, zero-padded.
func markValue(token uint64) string {
	return fmt.Sprintf("%020d", token)
}

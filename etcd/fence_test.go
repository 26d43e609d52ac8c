package etcd_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/etcd"
)

// A stale holder's write is refused, with the newer data kept and the mark
// in the error; an equal token passes; the mark moves only forward.
func TestFenceRefusesStaleToken(t *testing.T) {
	cli := newClient(t, endpoint(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := testNamespace()
	fence, data := ns+"fence", ns+"data"

	res, err := etcd.Fence(ctx, cli, fence, 7, clientv3.OpPut(data, "seven"), clientv3.OpGet(data))
	require.NoError(t, err, "a first token passes a new fence")
	require.Len(t, res, 2, "the responses of the caller's ops")
	assert.Equal(t, "seven", string(res[1].GetResponseRange().Kvs[0].Value))
	_, err = etcd.Fence(ctx, cli, fence, 9, clientv3.OpPut(data, "nine"))
	require.NoError(t, err, "a greater token passes")
	_, err = etcd.Fence(ctx, cli, fence, 9, clientv3.OpPut(data, "nine again"))
	require.NoError(t, err, "an equal token passes")

	_, err = etcd.Fence(ctx, cli, fence, 8, clientv3.OpPut(data, "eight"))
	require.ErrorIs(t, err, lock.ErrStaleToken)
	var se *lock.StaleTokenError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, lock.StaleTokenError{Fence: fence, Token: 8, Mark: 9}, *se)
	got, err := cli.Get(ctx, data)
	require.NoError(t, err)
	assert.Equal(t, "nine again", string(got.Kvs[0].Value), "the stale write wrote nothing")

	// Compared as numbers, not as text: 10 > 9, and the largest token.
	_, err = etcd.Fence(ctx, cli, fence, 10)
	require.NoError(t, err)
	_, err = etcd.Fence(ctx, cli, fence, math.MaxUint64)
	require.NoError(t, err)
	_, err = etcd.Fence(ctx, cli, fence, math.MaxUint64-1)
	assert.ErrorIs(t, err, lock.ErrStaleToken)

	_, err = etcd.Fence(ctx, cli, fence, 0)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument)
	_, err = etcd.Fence(ctx, cli, "", 1)
	assert.ErrorIs(t, err, lock.ErrInvalidArgument)
}

// Writers with interleaved tokens from 6 goroutines: whatever the order, no
// write with a lower token lands after one with a higher token.
func TestFenceInterleavedTokens(t *testing.T) {
	cli := newClient(t, endpoint(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := testNamespace()
	fence := ns + "fence"
	var mu sync.Mutex
	var applied []uint64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				token := uint64(i*6 + g + 1)
				_, err := etcd.Fence(ctx, cli, fence, token)
				if err == nil {
					mu.Lock()
					applied = append(applied, token)
					mu.Unlock()
				} else if !assert.ErrorIs(t, err, lock.ErrStaleToken) {
					return
				}
			}
		}()
	}
	wg.Wait()
	// applied is in commit order only within a goroutine; the fence's own
	// history is the proof: its mark never went down.
	resp, err := cli.Get(ctx, fence)
	require.NoError(t, err)
	var last string
	for rev := resp.Kvs[0].CreateRevision; rev <= resp.Kvs[0].ModRevision; rev++ {
		h, err := cli.Get(ctx, fence, clientv3.WithRev(rev))
		require.NoError(t, err)
		if len(h.Kvs) == 1 && h.Kvs[0].ModRevision == rev {
			v := string(h.Kvs[0].Value)
			assert.GreaterOrEqual(t, v, last, "the mark never decreases (revision %d)", rev)
			last = v
		}
	}
	assert.NotEmpty(t, applied)
	assert.Equal(t, "00000000000000000060", last, "the greatest token is the last mark")
}

package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/seed05627090/lock/faults"
)

func TestSentinelSetupTiming(t *testing.T) {
	t0 := time.Now()
	s := faults.StartSentinel(t, faults.SentinelOptions{})
	t.Logf("setup %v", time.Since(t0))
	ctx := ctxTimeout(t, 60*time.Second)
	master := s.Nodes[0].Addr
	for i := range 4 {
		k := time.Now()
		require.NoError(t, s.Node(master).Kill())
		nm, at, err := s.WaitPromotion(ctx, master)
		require.NoError(t, err, s.Logs())
		p := time.Since(k)
		require.NoError(t, s.WaitAgree(ctx, nm))
		a := time.Since(k)
		require.NoError(t, s.Rejoin(ctx, s.Node(master), nm))
		require.NoError(t, s.WaitStable(ctx, nm), s.Logs())
		t.Logf("failover %d: %s -> %s promoted %v agreed %v stable %v", i, master, nm, p, a, time.Since(k))
		_ = at
		master = nm
	}
}

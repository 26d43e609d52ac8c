package faults_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed05627090/lock"
	"github.com/seed05627090/lock/internal/faults"
)

const signalLease = 500 * time.Millisecond

// startHolder starts a child in role (a holder of the lock called name on
// the Redis at addr, with lease signalLease and the extra environment env)
// and returns it once it reports "held token=T", with T.
func startHolder(t *testing.T, ctx context.Context, role, addr, name string, env ...string) (*faults.Child, uint64) {
	t.Helper()
	ch := startChild(t, role, append([]string{
		"FAULTS_REDIS=" + addr, "FAULTS_LOCK=" + name, "FAULTS_LEASE=" + signalLease.String(),
	}, env...)...)
	word, f := faults.Fields(ch.Next(ctx))
	require.Equal(t, "held", word)
	stats.grants.Add(1)
	return ch, atou(t, f["token"])
}

// stopHolder stops (SIGSTOP) the holder ch and returns when.
func stopHolder(t *testing.T, ch *faults.Child) time.Time {
	t.Helper()
	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	fault(t, "SIGSTOP the holder")
	return stopped
}

// continueHolder continues (SIGCONT) the holder ch, stopped at stopped,
// once it has been stopped for two leases in all, and sends it "go".
func continueHolder(t *testing.T, ch *faults.Child, stopped time.Time) {
	t.Helper()
	time.Sleep(time.Until(stopped.Add(2 * signalLease)))
	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGCONT))
	ch.Send("go")
}

// waitTakeOver waits with c, within 10 s, for the lock called name that a
// child holds (lease 5 s), and returns it; when says when, for the
// failure message.
func waitTakeOver(t *testing.T, c *lock.Client, name, when string) *lock.Lock {
	t.Helper()
	l, err := c.Acquire(ctxTimeout(t, 10*time.Second), name,
		lock.Options{Wait: true, Lease: 5 * time.Second, MaxDuration: 20 * time.Second})
	require.NoError(t, err, "acquire %s", when)
	stats.grants.Add(1)
	return l
}

// TestHolderKilled kills (SIGKILL) a process that holds a lock with a short
// lease and a long MaxDuration: another client must get the lock within about
// one lease.
func TestHolderKilled(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "killed"
	ch, childToken := startHolder(t, ctx, "holder", srv.Addr, name)

	c := newClient(t, newRedis(t, srv.Addr), lock.WithPollInterval(50*time.Millisecond))
	_, err := c.Acquire(ctx, name, lock.Options{Lease: time.Second})
	expect(t, errors.Is(err, lock.ErrHeld), "acquire while the child holds the lock: %v, want ErrHeld", err)

	require.NoError(t, ch.Cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	fault(t, "SIGKILL the holder")
	_ = ch.Wait(ctx)

	l := waitTakeOver(t, c, name, "after the holder was killed")
	took := time.Since(killed)
	t.Logf("taken over %v after the holder was killed (lease %v)", took.Round(time.Millisecond), signalLease)
	expect(t, took < 3*signalLease, "the lock was free %v after its holder was killed, want < 3 x lease (%v)", took, 3*signalLease)
	expect(t, l.Token() > childToken, "token %d is not greater than the killed holder's %d", l.Token(), childToken)
	require.NoError(t, l.Release(ctx))
}

// roleHolder is the child of TestHolderKilled: it takes the lock with Do,
// reports "held token=T", and holds it until it is killed. (A stopped
// holder is one of the core scenarios every driver runs:
// internal/faults.Scenarios, TestDriverFaults.)
func roleHolder(t *testing.T) {
	rc, name := childRedis(t)
	lease := childDuration(t, "FAULTS_LEASE")
	c := newClient(t, rc)
	ctx := ctxTimeout(t, 30*time.Second)
	err := c.Do(ctx, name, lock.Options{Lease: lease, MaxDuration: time.Minute}, func(hctx context.Context) error {
		l, _ := lock.FromContext(hctx)
		report("held token=%d", l.Token())
		<-hctx.Done()
		return context.Cause(hctx)
	})
	report("done lost=%t err=%q", errors.Is(err, lock.ErrLost), errString(err))
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

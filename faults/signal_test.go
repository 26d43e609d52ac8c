package faults_test

import (
	"context"
	"errors"
	"strconv"
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

// TestHolderStopped stops (SIGSTOP) a process that holds a lock for longer
// than its lease, as a long GC pause or a frozen VM would. Another client
// takes the lock meanwhile and writes to a fenced resource. When the stopped
// process continues, its handler's context must be cancelled with ErrLost,
// and its own fenced write, with its older token, must be rejected.
func TestHolderStopped(t *testing.T) {
	srv := faults.StartRedis(t)
	direct := newRedis(t, srv.Addr)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "stopped"
	ch, childToken := startHolder(t, ctx, "holder", srv.Addr, name, "FAULTS_MODE=stop")
	stopped := stopHolder(t, ch)

	c := newClient(t, newRedis(t, srv.Addr), lock.WithPollInterval(50*time.Millisecond))
	l := waitTakeOver(t, c, name, "while the holder is stopped")
	t.Logf("taken over %v after the holder was stopped", time.Since(stopped).Round(time.Millisecond))
	expect(t, l.Token() > childToken, "token %d of the new holder is not greater than the stopped holder's %d", l.Token(), childToken)
	ok, err := fenced(ctx, direct, name, l.Token(), "new-holder")
	require.NoError(t, err)
	expect(t, ok, "the new holder's fenced write (token %d) was rejected", l.Token())

	continueHolder(t, ch, stopped)

	word, f := faults.Fields(ch.Next(ctx))
	require.Equal(t, "result", word)
	expect(t, f["write"] == "rejected", "the stopped holder's fenced write with its old token %d was %s", childToken, f["write"])
	expect(t, f["lost"] == "true", "the stopped holder's handler context was not cancelled with ErrLost after it continued: cause %s", f["cause"])
	word, f = faults.Fields(ch.Next(ctx))
	require.Equal(t, "done", word)
	expect(t, f["lost"] == "true", "Do of the stopped holder returned %s, want an error matching ErrLost", f["err"])
	require.NoError(t, ch.Wait(ctx), "child failed:\n%s", ch.Out())

	data, err := direct.Get(ctx, name+":data").Result()
	require.NoError(t, err)
	expect(t, data == "new-holder", "the fenced resource holds %q, want the new holder's write", data)
	v, _ := record(t, direct, keyOf(name))
	expect(t, recordOwner(v) == l.Owner(), "record %q after the old holder continued, want the new holder's (%s)", v, l.Owner())
	expect(t, l.Err() == nil, "the new holder lost its lock: %v", l.Err())
	require.NoError(t, l.Release(ctx))
}

// TestHolderKilled kills (SIGKILL) a process that holds a lock with a short
// lease and a long MaxDuration: another client must get the lock within about
// one lease.
func TestHolderKilled(t *testing.T) {
	srv := faults.StartRedis(t)
	ctx := ctxTimeout(t, 30*time.Second)
	const name = "killed"
	ch, childToken := startHolder(t, ctx, "holder", srv.Addr, name, "FAULTS_MODE=kill")

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

// roleHolder is the child of TestHolderStopped and TestHolderKilled. It takes
// the lock with Do and reports "held token=T". In mode "kill" it then holds it
// until it is killed. In mode "stop" it waits for "go" on stdin (sent after it
// was stopped and continued), makes a fenced write with its token, waits for
// its handler's context to end, and reports
// "result write=accepted|rejected lost=BOOL cause=..." and then
// "done lost=BOOL err=...".
func roleHolder(t *testing.T) {
	rc, name := childRedis(t)
	mode := childEnv(t, "FAULTS_MODE")
	lease := childDuration(t, "FAULTS_LEASE")
	c := newClient(t, rc)
	ctx := ctxTimeout(t, 30*time.Second)

	err := c.Do(ctx, name, lock.Options{Lease: lease, MaxDuration: time.Minute}, func(hctx context.Context) error {
		l, _ := lock.FromContext(hctx)
		report("held token=%d", l.Token())
		if mode == "kill" {
			<-hctx.Done()
			return context.Cause(hctx)
		}
		if cmd := readLine(stdin()); cmd != "go" {
			return errors.New("child: want go on stdin, got " + strconv.Quote(cmd))
		}
		// Write as a holder that does not know it was paused would.
		ok, err := fenced(ctx, rc, name, l.Token(), "stopped-holder")
		if err != nil {
			return err
		}
		write := "rejected"
		if ok {
			write = "accepted"
		}
		select {
		case <-hctx.Done():
		case <-time.After(5 * time.Second):
		}
		cause := context.Cause(hctx)
		report("result write=%s lost=%t cause=%q", write, errors.Is(cause, lock.ErrLost), errString(cause))
		return nil
	})
	report("done lost=%t err=%q", errors.Is(err, lock.ErrLost), errString(err))
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

package servers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(Main(m))
}

// TestPrivateRedis: without LOCK_REDIS_ADDR, the tests get a server of this
// binary's own, the LOCK_REDIS_SERVER binary, on a loopback port; the
// environment names it for child processes, and every call gets the same
// server.
func TestPrivateRedis(t *testing.T) {
	if os.Getenv(EnvRedisAddr) != "" && redisServer.proc == nil {
		t.Skipf("%s is set: the tests use that Redis and start none", EnvRedisAddr)
	}
	rc := Redis(t)
	addr := rc.Options().Addr
	assert.True(t, strings.HasPrefix(addr, "127.0.0.1:"), "a loopback address: %s", addr)
	assert.NotEqual(t, "127.0.0.1:6379", addr, "not the machine's own Redis")
	assert.Equal(t, addr, RedisAddr(t), "one server per binary")
	assert.Equal(t, addr, os.Getenv(EnvRedisAddr), "named in the environment for child processes")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := rc.Info(ctx, "server").Result()
	require.NoError(t, err)
	assert.Contains(t, info, "executable:"+RedisServer(t), "the server runs the %s binary", EnvRedisServer)
	assert.Contains(t, info, "process_id:"+strconv.Itoa(redisServer.proc.Cmd.Process.Pid))
}

// TestPrivatePostgres: without LOCK_POSTGRES_DSN, the tests get a
// PostgreSQL of this binary's own that answers a query on its DSN.
func TestPrivatePostgres(t *testing.T) {
	if os.Getenv(EnvPostgresDSN) != "" && postgresServer.proc == nil {
		t.Skipf("%s is set: the tests use that PostgreSQL and start none", EnvPostgresDSN)
	}
	dsn := PostgresDSN(t)
	assert.True(t, strings.HasPrefix(dsn, "postgres://postgres@127.0.0.1:"), "a loopback DSN: %s", dsn)
	assert.Equal(t, dsn, PostgresDSN(t), "one server per binary")
	assert.Equal(t, dsn, os.Getenv(EnvPostgresDSN), "named in the environment for child processes")

	bin, err := postgresBinDir()
	require.NoError(t, err)
	psql := filepath.Join(bin, "psql")
	if !isFile(psql) {
		t.Skipf("no %s to query the server with", psql)
	}
	out, err := exec.Command(psql, dsn, "-Atc", "SHOW fsync").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "off", strings.TrimSpace(string(out)))
}

// TestMissingBinary: a Redis server binary that is not there skips the
// test, saying what to install, unless a server is required.
func TestMissingBinary(t *testing.T) {
	t.Setenv(EnvRedisServer, "no-such-redis-server")
	_, err := redisBinary()
	require.Error(t, err)
	assert.ErrorAs(t, err, new(missing))
	assert.Contains(t, err.Error(), "apt-get install no-such-redis-server")
	assert.Contains(t, err.Error(), EnvRedisAddr)
}

// TestServersEnd runs this binary again as a child that starts both
// servers and then ends: by returning from its tests (Main's Run stops the
// servers and removes their directory), by a panic, or killed with SIGKILL
// (as go test does to a binary that outlives its timeout). In every case the
// servers are gone soon after; what a panic or a kill leaves in the
// temporary directory is removed by the next binary's Main (sweep).
func TestServersEnd(t *testing.T) {
	RedisServer(t)
	if _, err := postgresBinDir(); err != nil {
		end(t, RequirePostgres(), EnvRequirePostgres, err)
	}
	for _, how := range []string{"return", "panic", "kill"} {
		t.Run(how, func(t *testing.T) {
			if how != "return" && runtime.GOOS != "linux" {
				t.Skip("only Linux has a parent-death signal")
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(withoutServers(os.Environ()), childEnv+"="+how)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			stdin, err := cmd.StdinPipe() // a line on it ends the child
			require.NoError(t, err)
			var stderr strings.Builder // read once the child has been waited for
			cmd.Stderr = &stderr
			defer func() {
				if t.Failed() {
					t.Logf("the child's stderr:\n%s", stderr.String())
				}
			}()
			require.NoError(t, cmd.Start())
			var redisPid, pgPid int
			var dir string
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				_, _ = fmt.Sscanf(sc.Text(), "servers: redis=%d postgres=%d dir=%s", &redisPid, &pgPid, &dir)
				if dir != "" {
					break
				}
			}
			require.NotEmpty(t, dir, "the child reports its servers")
			assert.True(t, alive(redisPid) && alive(pgPid), "the child's servers run")
			if how == "kill" {
				require.NoError(t, cmd.Process.Kill())
			} else {
				_, err := io.WriteString(stdin, "end\n")
				require.NoError(t, err)
			}
			_, _ = io.Copy(io.Discard, stdout) // to its end, when the child ends
			err = cmd.Wait()
			if how == "return" {
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return !alive(redisPid) && !alive(pgPid) }, 30*time.Second,
				20*time.Millisecond, "the servers end with the child (redis %d, postgres %d)", redisPid, pgPid)
			if how != "return" {
				_, err := os.Stat(dir)
				require.NoError(t, err, "a child that did not return leaves its directory")
				sweep()
			}
			_, err = os.Stat(dir)
			assert.True(t, os.IsNotExist(err), "the directory is removed: %v", err)
		})
	}
}

// childEnv tells TestHelperProcess, in a child of TestServersEnd, how to
// end.
const childEnv = "LOCK_SERVERS_TEST_CHILD"

// TestHelperProcess is a child of TestServersEnd: it starts both servers,
// reports them on stdout, waits for a line on stdin (which a kill does not
// send), and ends as childEnv says. Elsewhere it does nothing.
func TestHelperProcess(t *testing.T) {
	how := os.Getenv(childEnv)
	if how == "" {
		return
	}
	Redis(t)
	PostgresDSN(t)
	fmt.Printf("servers: redis=%d postgres=%d dir=%s\n",
		redisServer.proc.Cmd.Process.Pid, postgresServer.proc.Cmd.Process.Pid, dir.path)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent has looked at the servers
	if how == "panic" {
		panic("a test panics")
	}
}

// withoutServers returns env without the variables that name servers.
func withoutServers(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, EnvRedisAddr+"=") && !strings.HasPrefix(kv, EnvPostgresDSN+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// alive reports whether process pid runs (a zombie, which a container's
// init may leave unreaped, does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm may hold spaces; the state follows ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

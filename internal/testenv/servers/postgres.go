package servers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// PostgresDSN returns the DSN of the tests' PostgreSQL: LOCK_POSTGRES_DSN
// when it is set, or else this binary's own server, started by the first
// call: a database cluster made by initdb in a new directory, run by
// postgres on a free loopback port (its unix socket in that directory,
// fsync off), as the postgres user when this process runs as root (which
// PostgreSQL refuses), and stopped by Main's Run. Its DSN is
// postgres://postgres@127.0.0.1:port/postgres?sslmode=disable (trust
// authentication), set in this process's environment as LOCK_POSTGRES_DSN,
// so that the test binary run again as a child process uses it too. The
// binaries are those of pg_config --bindir, or else of the latest
// /usr/lib/postgresql/*/bin, or else initdb's on PATH. Without them it skips
// the test, or fails it when RequirePostgres says so; a server that does not
// start fails it, with its output.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	if d := os.Getenv(EnvPostgresDSN); d != "" {
		return d
	}
	dsn, err := postgresServer.get(t, startPrivatePostgres)
	if err != nil {
		end(t, RequirePostgres(), EnvRequirePostgres, err)
	}
	return dsn
}

// startPrivatePostgres starts this binary's own PostgreSQL.
func startPrivatePostgres() (string, *Proc, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return "", nil, err
	}
	cred, err := postgresUser()
	if err != nil {
		return "", nil, err
	}
	d, err := serverDir("postgres")
	if err != nil {
		return "", nil, err
	}
	if cred != nil {
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", nil, err
		}
	}
	data := filepath.Join(d, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir = d
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// A free port found by listening may be taken by someone else before the
	// server binds it: try a few.
	for range 5 {
		var port int
		if port, err = FreePort(); err != nil {
			return "", nil, err
		}
		cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", d,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off")
		cmd.Dir = d
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		// Fast shutdown when this process ends: it ends the sessions and
		// leaves no shared memory behind.
		var p *Proc
		if p, err = Start(cmd, syscall.SIGINT); err != nil {
			return "", nil, err
		}
		if err = waitReady(p); err == nil {
			dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return dsn, p, os.Setenv(EnvPostgresDSN, dsn)
		}
		p.Stop(syscall.SIGINT, 10*time.Second)
	}
	return "", nil, fmt.Errorf("start PostgreSQL: %w", err)
}

// waitReady waits up to a minute for the server p runs to say that it
// accepts connections. It fails, with what the server printed, when the
// server exits first or does not say so in time.
func waitReady(p *Proc) error {
	deadline := time.After(time.Minute)
	for !strings.Contains(p.Log(), "database system is ready to accept connections") {
		select {
		case <-p.Exited():
			return fmt.Errorf("postgres exited: %s", strings.TrimSpace(p.Log()))
		case <-deadline:
			return fmt.Errorf("postgres not ready within a minute: %s", strings.TrimSpace(p.Log()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// postgresBinDir returns the directory of initdb and postgres.
func postgresBinDir() (string, error) {
	var dirs []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	installed, _ := filepath.Glob("/usr/lib/postgresql/*/bin") // Debian's, one per major version
	slices.SortFunc(installed, func(a, b string) int { return majorOf(b) - majorOf(a) })
	dirs = append(dirs, installed...)
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", missing("no PostgreSQL server binaries (initdb and postgres, looked for with pg_config --bindir, " +
		"in /usr/lib/postgresql/*/bin and on PATH): install them (apt-get install postgresql), " +
		"or set " + EnvPostgresDSN + " to a PostgreSQL the tests may write into")
}

// majorOf returns the major version in a path /usr/lib/postgresql/15/bin,
// 0 when it has none.
func majorOf(binDir string) int {
	v := filepath.Base(filepath.Dir(binDir))
	n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return n
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// postgresUser returns the credential PostgreSQL runs with: nil (this
// process's own) but under root, which PostgreSQL refuses; there, the
// postgres user's.
func postgresUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, missing(fmt.Sprintf("PostgreSQL refuses to run as root, and there is no postgres user to run it as (%v): "+
			"install PostgreSQL's server package (apt-get install postgresql makes the user), run the tests as another user, "+
			"or set %s to a PostgreSQL the tests may write into", err, EnvPostgresDSN))
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("the postgres user's ids %q, %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

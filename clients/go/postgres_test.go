package hotkeyd

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq"
)

// startPostgres starts a throwaway PostgreSQL cluster on a free loopback port (as
// hotkeyd.testing.PostgresServer does: trust auth on 127.0.0.1, fsync off; run as the
// postgres user when the test runs as root) and returns an open *sql.DB to it.
func startPostgres(t testing.TB) *sql.DB {
	t.Helper()
	initdb, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Strings(initdb)
	bindir := ""
	if len(initdb) > 0 {
		bindir = filepath.Dir(initdb[len(initdb)-1])
	} else if p, err := exec.LookPath("initdb"); err == nil {
		bindir = filepath.Dir(p)
	}
	if bindir == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("PostgreSQL is required in CI but is not installed")
		}
		t.Skip("PostgreSQL not installed")
	}
	dir, err := os.MkdirTemp("", "hotkeyd-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	name := "postgres"
	var attr *syscall.SysProcAttr
	if os.Geteuid() == 0 { // PostgreSQL refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal("PostgreSQL refuses to run as root and there is no 'postgres' user: ", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	} else if u, err := user.Current(); err == nil {
		name = u.Username
	}
	data := filepath.Join(dir, "data")
	cmd := exec.Command(filepath.Join(bindir, "initdb"), "-D", data, "-U", name, "--auth=trust", "--no-sync", "-E", "UTF8")
	cmd.SysProcAttr, cmd.Dir = attr, dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	log, _ := os.Create(filepath.Join(dir, "server.log"))
	srv := exec.Command(filepath.Join(bindir, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-h", "127.0.0.1",
		"-k", dir, "-c", "fsync=off", "-c", "full_page_writes=off")
	srv.SysProcAttr, srv.Dir, srv.Stdout, srv.Stderr = attr, dir, log, log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(os.Interrupt) // fast shutdown
		_, _ = srv.Process.Wait()
		_ = log.Close()
	})
	db, err := sql.Open("postgres", fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=postgres sslmode=disable", port, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for db.Ping() != nil {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("PostgreSQL on %d not ready after 30 s:\n%s", port, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return db
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bucketfs/internal/kv"
	"bucketfs/internal/kv/kvtest"
	"bucketfs/internal/pgtest"

	"github.com/jackc/pgx/v5"
)

// open opens the store of schema in the database at url and closes it
// when t ends.
func open(t testing.TB, url, schema string) kv.Store {
	t.Helper()
	return openWith(t, url, Options{Schema: schema})
}

func openWith(t testing.TB, url string, opt Options) kv.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, url, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The kv contract, on one server: each behaviour in a schema of its own;
// then again with AsyncCommit.
func TestPostgresStore(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	n := 0
	kvtest.Run(t, func(t *testing.T) kv.Store {
		n++
		return open(t, url, fmt.Sprint("contract", n))
	})
	t.Run("AsyncCommit", func(t *testing.T) {
		kvtest.Run(t, func(t *testing.T) kv.Store {
			n++
			return openWith(t, url, Options{Schema: fmt.Sprint("contract", n), AsyncCommit: true})
		})
	})
}

// The tests below share one server; each has a database of its own.
func TestPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	for _, tt := range []struct {
		name string
		test func(t *testing.T, srv *pgtest.Server, url string)
	}{
		{"TwoStoresOnOneDatabaseSeeEachOthersCommits", testTwoStores},
		{"AnUpdateThatLosesASerializationConflictRunsAgain", testConflictRunsAgain},
		{"AnOpenOfAnotherSchemaVersionIsRefusedInOneLine", testSchemaVersionRefused},
		{"ServersCreatingTheSchemaAtOnceAllSucceed", testConcurrentSchemaCreation},
		{"SchemasOfOneDatabaseAreSeparate", testSchemasAreSeparate},
		{"ErrorsNameTheDatabaseAndNotThePassword", testErrorsNameTheDatabase},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.test(t, srv, srv.NewDatabase(t)) })
	}
}

func testTwoStores(t *testing.T, srv *pgtest.Server, url string) {
	a, b := open(t, url, "bucketfs"), open(t, url, "bucketfs")
	kvtest.Set(t, a, "from-a", "1")
	if got := kvtest.ViewGet(t, b, "from-a"); got != "1" {
		t.Errorf("server b reads %q for server a's commit, want 1", got)
	}
	kvtest.Set(t, b, "from-a", "2")
	if got := kvtest.ViewGet(t, a, "from-a"); got != "2" {
		t.Errorf("server a reads %q after server b's commit, want 2", got)
	}
}

// Update A reads k; Update B (another server) overwrites k and commits;
// A's write of k then fails to serialize, and A runs fn again, reading B's
// value this time.
func testConflictRunsAgain(t *testing.T, srv *pgtest.Server, url string) {
	a, b := open(t, url, "bucketfs"), open(t, url, "bucketfs")
	kvtest.Set(t, a, "k", "0")
	runs := 0
	var seen []string
	err := a.Update(context.Background(), func(tx kv.Txn) error {
		runs++
		v, err := tx.Get([]byte("k"))
		if err != nil {
			return err
		}
		seen = append(seen, string(v))
		if runs == 1 {
			kvtest.Set(t, b, "k", "b")
		}
		return tx.Set([]byte("k"), append(v, 'a'))
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if runs != 2 || fmt.Sprint(seen) != "[0 b]" {
		t.Errorf("fn ran %d times reading %v; want twice, reading 0 then b", runs, seen)
	}
	if got := kvtest.ViewGet(t, a, "k"); got != "ba" {
		t.Errorf("k = %q, want ba (b's write, then the second run's)", got)
	}
}

func testSchemaVersionRefused(t *testing.T, srv *pgtest.Server, url string) {
	s := open(t, url, "bucketfs")
	kvtest.Set(t, s, "k", "v")
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "UPDATE bucketfs.schema_version SET version = 99"); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), url, Options{})
	want := fmt.Sprintf("database schema bucketfs is version 99; this bucketfs needs %d", SchemaVersion)
	if err == nil || !strings.HasSuffix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open of a version 99 schema = %v; want one line ending %q", err, want)
	}
	if !strings.HasPrefix(err.Error(), "postgres "+srv.Addr()+"/") {
		t.Errorf("the error does not name the database: %v", err)
	}
}

func testConcurrentSchemaCreation(t *testing.T, srv *pgtest.Server, url string) {
	const servers = 6
	var wg sync.WaitGroup
	stores := make([]kv.Store, servers)
	errs := make([]error, servers)
	for i := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(context.Background(), url, Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("server %d: Open: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	kvtest.Set(t, stores[0], "k", "v")
	if got := kvtest.ViewGet(t, stores[servers-1], "k"); got != "v" {
		t.Errorf("the servers do not share one table: Get = %q", got)
	}
}

func testSchemasAreSeparate(t *testing.T, srv *pgtest.Server, url string) {
	a, b := open(t, url, "fs_a"), open(t, url, "fs_b")
	kvtest.Set(t, a, "k", "a")
	if got := kvtest.ViewGet(t, b, "k"); got != "<none>" {
		t.Errorf("schema fs_b sees fs_a's key: %q", got)
	}
	if _, err := Open(context.Background(), url, Options{Schema: "no-dash"}); err == nil {
		t.Errorf("a schema name that is not an identifier was accepted")
	}
}

func testErrorsNameTheDatabase(t *testing.T, srv *pgtest.Server, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wrong := strings.Replace(url, pgtest.Password, "not-the-"+pgtest.Password, 1)
	_, err := Open(ctx, wrong, Options{})
	if err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	if !strings.HasPrefix(err.Error(), "postgres "+srv.Addr()+"/test") || strings.Contains(err.Error(), pgtest.Password) {
		t.Errorf("error = %q; want it to start with the database's name and not hold the password", err)
	}
	_, err = Open(ctx, "postgres://u:secret-in-url@[::1", Options{})
	if err == nil || strings.Contains(err.Error(), "secret-in-url") {
		t.Errorf("a URL that does not parse: error %v; want one without the password", err)
	}
}

// Restarting the server between Updates: the next Update reconnects and
// succeeds; while the server is down an Update fails when its context
// ends, and writes nothing.
func TestAnUpdateAfterARestartReconnectsAndAnUpdateWhileDownFailsAtItsDeadline(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := open(t, url, "bucketfs")
	bounded := openWith(t, url, Options{OpTimeout: time.Second})
	increment := func(ctx context.Context) error {
		return s.Update(ctx, func(tx kv.Txn) error {
			v, err := tx.Get([]byte("n"))
			if err != nil && !errors.Is(err, kv.ErrNotFound) {
				return err
			}
			return tx.Set([]byte("n"), append(v, '+'))
		})
	}
	long, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := increment(long); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	if got := kvtest.ViewGet(t, s, "n"); got != "+" {
		t.Errorf("a View after the restart reads n = %q, want +", got)
	}
	if err := increment(long); err != nil {
		t.Fatalf("Update after a restart: %v", err)
	}
	srv.Stop()
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	err := increment(short)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kv.ErrUnknownOutcome) {
		t.Errorf("Update while the server is down = %v; want the deadline, and a known outcome", err)
	}
	// Without a deadline of the caller's, Options.OpTimeout bounds it.
	start := time.Now()
	if err := bounded.Update(context.Background(), func(tx kv.Txn) error { return tx.Set([]byte("m"), []byte("1")) }); err == nil {
		t.Errorf("an Update while the server is down succeeded")
	} else if took := time.Since(start); took > 10*time.Second {
		t.Errorf("an Update while the server is down, with no deadline of the caller's, took %v; OpTimeout is 1s", took)
	}
	if err := bounded.View(context.Background(), func(r kv.Reader) error { _, err := r.Get([]byte("n")); return err }); err == nil {
		t.Errorf("a View while the server is down succeeded")
	}
	srv.Start()
	if err := increment(long); err != nil {
		t.Fatalf("Update after the server came back: %v", err)
	}
	if got := kvtest.ViewGet(t, s, "n"); got != "+++" {
		t.Errorf("n = %q, want the three Updates that returned nil (+++)", got)
	}
}

// A kill -9 of the server leaves the pool's connections dead without the
// pool knowing. An Update whose first statement is its COMMIT batch (its
// one read was a guess) begun while the server is down must not send that
// batch on a dead connection, where its outcome would be unknown (an EIO
// to a writer; the three-server restart test saw FUSE writes fail so): it
// waits for the server, as an Update that reads first does, and commits
// once.
func TestAnUpdateWithNoReadBegunWhileTheServerIsDownWaitsForIt(t *testing.T) {
	srv := pgtest.Start(t)
	s := open(t, srv.NewDatabase(t), "bucketfs").(*Store)
	ctx := context.Background()
	kvtest.Set(t, s, "n", "")
	// Four connections in the pool, each used a moment ago: four Views
	// that each hold theirs until all four have read.
	var wg, inside sync.WaitGroup
	inside.Add(4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.View(ctx, func(r kv.Reader) error {
				_, err := r.Get([]byte("n"))
				inside.Done()
				inside.Wait()
				return err
			})
		}()
	}
	wg.Wait()
	srv.Kill()
	done := make(chan error, 1)
	runs := 0
	go func() {
		done <- s.Update(ctx, func(tx kv.Txn) error {
			runs++
			v, err := tx.Get([]byte("n")) // a guess on the first run
			if err != nil {
				return err
			}
			return tx.Set([]byte("n"), append(v, '+'))
		})
	}()
	srv.Start()
	if err := <-done; err != nil {
		t.Fatalf("Update begun while the server was down: %v; want it to wait and commit", err)
	}
	if got := kvtest.ViewGet(t, s, "n"); got != "+" {
		t.Errorf("n = %q after %d runs, want + (one commit)", got, runs)
	}
}

// kill -9 of the server during a stream of Updates from several
// goroutines: after the restart every Update that returned nil is there,
// and none that failed with a known outcome is.
func TestEveryAcknowledgedUpdateSurvivesAKillOfTheServer(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := open(t, url, "bucketfs")
	const writers = 4
	var acked atomic.Int64
	type outcome struct {
		key     string
		err     error
		unknown bool
	}
	results := make([][]outcome, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				key := fmt.Sprintf("w%d/%06d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				err := s.Update(ctx, func(tx kv.Txn) error {
					if _, err := tx.Get([]byte(fmt.Sprintf("w%d/last", w))); err != nil && !errors.Is(err, kv.ErrNotFound) {
						return err
					}
					tx.Set([]byte(fmt.Sprintf("w%d/last", w)), []byte(key))
					return tx.Set([]byte(key), []byte("v"))
				})
				cancel()
				results[w] = append(results[w], outcome{key, err, errors.Is(err, kv.ErrUnknownOutcome)})
				if err != nil {
					return
				}
				acked.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for acked.Load() < 200 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling the writers' progress
	}
	srv.Kill()
	wg.Wait()
	srv.Start()
	after := open(t, url, "bucketfs")
	total := 0
	after.View(context.Background(), func(r kv.Reader) error {
		for w := range writers {
			for _, o := range results[w] {
				_, err := r.Get([]byte(o.key))
				switch {
				case o.err == nil && err != nil:
					t.Errorf("%s: acknowledged, then lost in the kill (%v)", o.key, err)
				case o.err != nil && !o.unknown && err == nil:
					t.Errorf("%s: failed with %v, yet it committed", o.key, o.err)
				case o.err == nil:
					total++
				}
			}
		}
		return nil
	})
	if total < 200 {
		t.Errorf("only %d Updates acknowledged before the kill; want 200 or more", total)
	}
}

// With AsyncCommit, Updates are durable at Sync: a kill -9 of the server
// right after a Sync keeps every Update committed before it, also those of
// another server that the syncing one saw.
func TestWithAsyncCommitASyncKeepsEveryCommitSeenBeforeItThroughAKill(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	a := openWith(t, url, Options{AsyncCommit: true})
	b := openWith(t, url, Options{AsyncCommit: true})
	ctx := context.Background()
	const n = 100
	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	for i := range n {
		kvtest.Set(t, a, key(i), "v")
	}
	if got := kvtest.ViewGet(t, b, key(n-1)); got != "v" {
		t.Fatalf("server b does not see server a's last commit: %q", got)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	srv.Kill()
	srv.Start()
	after := open(t, url, "bucketfs")
	after.View(ctx, func(r kv.Reader) error {
		for i := range n {
			if got := kvtest.Get(t, r, key(i)); got != "v" {
				t.Errorf("%s, committed by server a and seen by server b before its Sync, lost in the kill: %q", key(i), got)
			}
		}
		return nil
	})
}

// With AsyncCommit, a Sync on a database that restarted since an Update
// committed on its earlier run cannot vouch for that Update (a crash may
// have lost it, and the new run's log does not hold it): it fails with
// kv.ErrUnknownOutcome, and so does every Sync after it. A Sync with no
// such Update (all made durable before the restart, or made after it)
// succeeds. Issue 23: two servers lost fsynced files in a kill of the
// database when Sync answered for the new run alone.
func TestWithAsyncCommitASyncAfterTheDatabaseRestartedFailsForCommitsOfTheEarlierRun(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	ctx := context.Background()
	synced := openWith(t, url, Options{AsyncCommit: true})
	unsynced := openWith(t, url, Options{AsyncCommit: true})
	kvtest.Set(t, synced, "a", "1")
	if err := synced.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	kvtest.Set(t, unsynced, "b", "1")
	for i, restart := range []func(){srv.Restart, func() { srv.Kill(); srv.Start() }} {
		restart()
		// On the new run. A pooled connection of the old run may take the
		// first try: a commit on it has an unknown outcome.
		for try := 0; ; try++ {
			err := synced.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte(fmt.Sprint("after", i)), []byte("1")) })
			if err == nil {
				break
			}
			if !errors.Is(err, kv.ErrUnknownOutcome) || try > 20 {
				t.Fatalf("restart %d: an Update on the new run: %v", i, err)
			}
		}
		if err := synced.Sync(ctx); err != nil {
			t.Errorf("restart %d: Sync of a store whose earlier commits were all made durable: %v", i, err)
		}
		for try := range 2 {
			if err := unsynced.Sync(ctx); !errors.Is(err, kv.ErrUnknownOutcome) {
				t.Errorf("restart %d, Sync %d of a store with a commit of the earlier run not made durable: %v, want ErrUnknownOutcome", i, try, err)
			}
		}
	}
}

// The round trips the package doc promises, as Stats counts them: an
// Update that only writes is one (BEGIN, the writes and COMMIT in one
// batch); one that reads a key first is two (the read carries BEGIN, the
// writes travel with COMMIT), or one when this store read or wrote the key
// before (a guess, checked in the batch of the writes: guess.go); a View
// of one key is one (the read with BEGIN; its COMMIT is sent after the
// View returned, unwaited); a Prefetch of three keys is one, and the Gets
// of those keys none. Keys another store wrote are not guessed.
func TestRoundTripsOfUpdatesAndViews(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	s := open(t, url, "bucketfs").(*Store)
	kvtest.Set(t, open(t, url, "bucketfs"), "x", "0", "y", "0", "z", "0")
	ctx := context.Background()
	cost := func(what string, want int64, fn func() error) {
		t.Helper()
		before := s.Stats().RoundTrips
		if err := fn(); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats().RoundTrips - before; got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}
	cost("a write-only Update", 1, func() error {
		return s.Update(ctx, func(tx kv.Txn) error { return tx.Set([]byte("a"), []byte("1")) })
	})
	cost("an Update that reads a key, then writes two", 2, func() error {
		return s.Update(ctx, func(tx kv.Txn) error {
			if _, err := tx.Get([]byte("x")); err != nil {
				return err
			}
			if err := tx.Set([]byte("b"), []byte("2")); err != nil {
				return err
			}
			return tx.Set([]byte("c"), []byte("3"))
		})
	})
	unwaited := s.Stats().Unwaited
	cost("a View of one key", 1, func() error {
		return s.View(ctx, func(r kv.Reader) error { _, err := r.Get([]byte("b")); return err })
	})
	cost("an Update that reads a key it wrote before, then writes one", 1, func() error {
		return s.Update(ctx, func(tx kv.Txn) error {
			if _, err := tx.Get([]byte("a")); err != nil {
				return err
			}
			return tx.Set([]byte("e"), []byte("5"))
		})
	})
	cost("an Update that only reads keys it wrote before", 1, func() error {
		return s.Update(ctx, func(tx kv.Txn) error {
			if _, err := tx.Get([]byte("a")); err != nil {
				return err
			}
			_, err := tx.Get([]byte("e"))
			return err
		})
	})
	cost("an Update that prefetches three keys, reads them and writes one", 2, func() error {
		return s.Update(ctx, func(tx kv.Txn) error {
			if err := tx.Prefetch([]byte("y"), []byte("z"), []byte("none")); err != nil {
				return err
			}
			for _, k := range []string{"y", "z", "none", "y"} {
				if _, err := tx.Get([]byte(k)); err != nil && !errors.Is(err, kv.ErrNotFound) {
					return err
				}
			}
			return tx.Set([]byte("d"), []byte("4"))
		})
	})
	cost("a View that prefetches two keys and reads them", 1, func() error {
		return s.View(ctx, func(r kv.Reader) error {
			if err := r.Prefetch([]byte("c"), []byte("d")); err != nil {
				return err
			}
			if _, err := r.Get([]byte("c")); err != nil {
				return err
			}
			_, err := r.Get([]byte("d"))
			return err
		})
	})
	cost("a View that reads an index entry and the key it names", 1, func() error {
		return s.View(ctx, func(r kv.Reader) error {
			// "d"'s value is "4": it names "c" + "4" = "c4", missing.
			if err := r.PrefetchRef([]byte("d"), []byte("c"), 1, []byte("a")); err != nil {
				return err
			}
			for _, k := range []string{"d", "c4", "a"} {
				if _, err := r.Get([]byte(k)); err != nil && !errors.Is(err, kv.ErrNotFound) {
					return err
				}
			}
			return nil
		})
	})
	// The Views' COMMITs are sent in the background; Close waits for them.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Unwaited - unwaited; got != 3 {
		t.Errorf("%d unwaited statements for three Views, want 3 (their COMMITs)", got)
	}
	st := s.Stats()
	if st.Updates != 5 || st.Attempts != 5 || st.Views < 3 || st.Guessed != 3 || st.Stale != 0 {
		t.Errorf("Stats %+v: want 5 Updates in 5 attempts, three Views and 3 guessed reads, none stale", st)
	}
}

// A View (or Update) begun while the database is down waits for it, up
// to Options.OpTimeout, rather than failing at once: it has read nothing,
// so waiting is safe. The three-server cluster test found NFS LOOKUPs
// failing with EIO within a millisecond of a restart.
func TestAViewBegunWhileTheDatabaseIsDownWaitsForIt(t *testing.T) {
	srv := pgtest.Start(t)
	s := open(t, srv.NewDatabase(t), "bucketfs")
	kvtest.Set(t, s, "a", "1")
	srv.Stop()
	back := make(chan struct{})
	go func() {
		defer close(back)
		time.Sleep(700 * time.Millisecond) // down for a while: what is tested is the wait
		srv.Start()
	}()
	var got []byte
	err := s.View(context.Background(), func(r kv.Reader) error {
		var err error
		got, err = r.Get([]byte("a"))
		return err
	})
	<-back
	if err != nil || string(got) != "1" {
		t.Fatalf("a View begun while the database was down: %q, %v; want it to wait and read 1", got, err)
	}
	if err := s.Update(context.Background(), func(tx kv.Txn) error { return tx.Set([]byte("b"), []byte("2")) }); err != nil {
		t.Fatalf("an Update after: %v", err)
	}
}

// Every statement of the store is planned as an index scan (joined by
// nested loop), also as the generic plan the server caches for a prepared
// statement, which is made from what the table held then: pgbench saw a
// lookup's plan, made while kv was small, read the whole table once it
// had grown (1.5 ms a lookup instead of 0.13). The store's sessions turn
// sequential scans and hash and merge joins off; with the planner's
// defaults (asked for in the URL) the same statement on the same small
// table (analyzed, as autovacuum does) is planned with a sequential scan.
func TestStatementsArePlannedAsIndexScansOnASmallTable(t *testing.T) {
	url := pgtest.Start(t).NewDatabase(t)
	plan := func(s *Store) string {
		t.Helper()
		ctx := context.Background()
		kvtest.Set(t, s, "d1", "00000001", "i00000001", "x")
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		var out strings.Builder
		for _, q := range []string{
			// What autovacuum records of a small table.
			"ANALYZE " + pgx.Identifier{s.opt.Schema, "kv"}.Sanitize(),
			"SET plan_cache_mode = force_generic_plan",
			"PREPARE lookup AS " + s.sql.getManyRef,
		} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := c.Query(ctx, `EXPLAIN EXECUTE lookup('{"\\x6431"}'::bytea[], '\x6431'::bytea, '\x69'::bytea, 8)`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			out.WriteString(line + "\n")
		}
		rows.Close()
		c.Exec(ctx, "DEALLOCATE lookup")
		c.Exec(ctx, "RESET plan_cache_mode")
		return out.String()
	}
	ours := plan(open(t, url, "ours").(*Store))
	if strings.Contains(ours, "Seq Scan") || strings.Contains(ours, "Hash Join") || strings.Contains(ours, "Merge Join") {
		t.Errorf("the store's plan of a lookup on a small table reads the whole table:\n%s", ours)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	defaults := plan(open(t, url+sep+"enable_seqscan=on&enable_hashjoin=on&enable_mergejoin=on", "defaults").(*Store))
	if !strings.Contains(defaults, "Seq Scan") {
		t.Errorf("with the planner's defaults, the same lookup is planned with no sequential scan, so this test shows nothing:\n%s", defaults)
	}
}

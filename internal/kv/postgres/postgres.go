package postgres

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"bucketfs/internal/kv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the version of the tables this bucketfs keeps. A
// database schema of another version is refused by Open.
const SchemaVersion = 1

// Options tunes the PostgreSQL store. The zero value gives the defaults.
type Options struct {
	// Schema is the PostgreSQL schema that holds the store's tables.
	// Default "bucketfs". Two file systems may share one database in two
	// schemas. It must be a plain identifier: letters, digits and _.
	Schema string
	// MaxConns bounds the connections of the pool. Default 16. Every
	// running View, Update and open Snapshot holds one.
	MaxConns int32
	// ScanPage is the most rows one read of a Scan fetches. Default 1024;
	// a Scan's first read fetches at most 64, as most scans stop early
	// (a lookup, a page of a directory listing).
	ScanPage int
	// MaxBackoff bounds the pause before Update runs fn again after a
	// conflict or a lost connection. Default 200ms.
	MaxBackoff time.Duration
	// OpTimeout bounds one View, Update (with its retries) or Sync, on
	// top of the caller's context: past it they fail (an Update whose
	// COMMIT was under way then with kv.ErrUnknownOutcome). So a database
	// that is down, or unreachable without the connection failing, makes
	// callers fail after it rather than wait for ever. Default 30s.
	OpTimeout time.Duration
	// AsyncCommit makes Updates commit with synchronous_commit off: they
	// return before their commit record is flushed, and are durable only
	// after Sync, as on Pebble. Without it every Update is durable when it
	// returns and Sync does nothing.
	//
	// Unlike Pebble's, this store's database can crash while its user
	// runs on: the commits not yet flushed are lost then, and the user
	// may have acted on them. A Sync on the restarted database would flush
	// only the new run's log, so Sync fails instead (see Sync), for good.
	// bucketfs servers do not use AsyncCommit for that reason.
	AsyncCommit bool
}

// Store is the kv.Store on PostgreSQL. All methods are safe for
// concurrent use.
type Store struct {
	pool *pgxpool.Pool
	name string // host:port/database, for errors (never the password)
	opt  Options
	sql  statements

	// With AsyncCommit: the synchronous_commit level of Sync's commit, and
	// this store's row in sync_marks, which Sync writes.
	syncLevel string
	mark      []byte

	// With AsyncCommit: the runs of the database (instanceOf) that
	// Updates committed on since the last Sync began, and the error every
	// later Sync returns once one of them was not the run Sync reached.
	mu       sync.Mutex
	unsynced map[string]bool
	lost     error

	// guesses are values recent transactions read or wrote, which an
	// Update may take instead of reading them (guess.go).
	guesses *guesses

	stats struct {
		views, updates, attempts, roundTrips, unwaited, syncs atomic.Int64
		guessed, stale                                        atomic.Int64
	}

	// ending counts the Views whose COMMIT runs in the background
	// (endLater); Close waits for them.
	ending sync.WaitGroup
}

// Stats counts what a store asked of the database since it was opened.
type Stats struct {
	Views, Updates int64
	// Attempts counts runs of Updates' fns: Attempts - Updates were run
	// again after a conflict or a lost connection.
	Attempts int64
	// RoundTrips counts the statements, or batches of statements, sent
	// and waited for: the latency a caller pays.
	RoundTrips int64
	// Unwaited counts the statements sent that no caller waits for: the
	// COMMIT of each View, the ROLLBACK of each Update run that did not
	// commit.
	Unwaited int64
	Syncs    int64
	// Guessed counts the reads of Updates answered by guesses (guess.go);
	// Stale the Updates run again because one of them was wrong.
	Guessed, Stale int64
}

// Stats returns the store's counts so far.
func (s *Store) Stats() Stats {
	return Stats{Views: s.stats.views.Load(), Updates: s.stats.updates.Load(), Attempts: s.stats.attempts.Load(),
		RoundTrips: s.stats.roundTrips.Load(), Unwaited: s.stats.unwaited.Load(), Syncs: s.stats.syncs.Load(),
		Guessed: s.stats.guessed.Load(), Stale: s.stats.stale.Load()}
}

// instanceKey is where a connection keeps the run of the database it
// reached (pgconn's CustomData), set when it connects.
const instanceKey = "bucketfs.instance"

// instanceOf returns the run of the database c is connected to: the
// postmaster's start time, which a restart changes (a crash too).
func instanceOf(c *pgx.Conn) string {
	v, _ := c.PgConn().CustomData()[instanceKey].(string)
	return v
}

// noteCommit records, with AsyncCommit, that an Update committed on c.
func (s *Store) noteCommit(c *pgx.Conn) {
	if !s.opt.AsyncCommit {
		return
	}
	s.mu.Lock()
	s.unsynced[instanceOf(c)] = true
	s.mu.Unlock()
}

// AsyncCommit reports whether Updates commit asynchronously (Options, or
// synchronous_commit=off in the URL).
func (s *Store) AsyncCommit() bool { return s.opt.AsyncCommit }

var _ kv.Store = (*Store)(nil)

// statements are the SQL texts of one schema.
type statements struct {
	get, getMany, getManyRef, setOne, setMany    string
	deleteMany, deleteRange                      string
	scanFrom, scanFromTo, scanAfter, scanAfterTo string
	syncMark, dropMark                           string
	checkGuesses                                 string
}

func newStatements(schema string) statements {
	t := pgx.Identifier{schema, "kv"}.Sanitize()
	return statements{
		get:     "SELECT v FROM " + t + " WHERE k = $1",
		getMany: "SELECT k, v FROM " + t + " WHERE k = ANY($1::bytea[])",
		// The rows of $1, then the row named by $2's value: $3 followed
		// by its first $4 bytes, found by a subquery (an equality on the
		// primary key: an index scan). BenchmarkLookup: a join of a CTE
		// ran slower than two round trips on loopback; this about 5 %
		// faster.
		getManyRef: "SELECT k, v FROM " + t + " WHERE k = ANY($1::bytea[]) UNION ALL SELECT k, v FROM " + t +
			" WHERE k = (SELECT $3::bytea || substring(v FROM 1 FOR $4) FROM " + t + " WHERE k = $2 AND length(v) >= $4)",
		setOne:      "INSERT INTO " + t + " (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
		setMany:     "INSERT INTO " + t + " (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
		deleteMany:  "DELETE FROM " + t + " WHERE k = ANY($1::bytea[])",
		deleteRange: "DELETE FROM " + t + " WHERE k >= $1 AND k < $2",
		scanFrom:    "SELECT k, v FROM " + t + " WHERE k >= $1 ORDER BY k LIMIT $2",
		scanFromTo:  "SELECT k, v FROM " + t + " WHERE k >= $1 AND k < $3 ORDER BY k LIMIT $2",
		scanAfter:   "SELECT k, v FROM " + t + " WHERE k > $1 ORDER BY k LIMIT $2",
		scanAfterTo: "SELECT k, v FROM " + t + " WHERE k > $1 AND k < $3 ORDER BY k LIMIT $2",
		syncMark: "INSERT INTO " + pgx.Identifier{schema, "sync_marks"}.Sanitize() + " (store, n) VALUES ($1, 1)" +
			" ON CONFLICT (store) DO UPDATE SET n = " + pgx.Identifier{schema, "sync_marks"}.Sanitize() + ".n + 1",
		dropMark: "DELETE FROM " + pgx.Identifier{schema, "sync_marks"}.Sanitize() + " WHERE store = $1",
		// The guesses $1 (keys) and $2 (values, NULL: no row) against the
		// rows: a failed cast of staleGuess when one differs, which fails
		// the transaction (guess.go). Each key is an equality on the
		// primary key (a nested loop of index scans; Open turns the other
		// joins off).
		checkGuesses: "SELECT (CASE WHEN bool_and(r.v IS NOT DISTINCT FROM g.v) THEN '1' ELSE '" + staleGuess + "' END)::int" +
			" FROM unnest($1::bytea[], $2::bytea[]) AS g(k, v) LEFT JOIN " + t + " r ON r.k = g.k",
	}
}

var syncLevels = map[string]bool{"on": true, "remote_apply": true, "remote_write": true, "local": true, "off": true}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Open connects to the database at url (a libpq URL or key=value string:
// password from it, PGPASSWORD or ~/.pgpass, TLS by sslmode) and returns
// the store kept in opt.Schema. The first Open on a database without the
// schema creates it; an Open that finds the schema at another version
// fails with a one-line error saying both versions.
func Open(ctx context.Context, url string, opt Options) (kv.Store, error) {
	if opt.Schema == "" {
		opt.Schema = "bucketfs"
	}
	if opt.MaxConns <= 0 {
		opt.MaxConns = 16
	}
	if opt.ScanPage <= 0 {
		opt.ScanPage = 1024
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 200 * time.Millisecond
	}
	if opt.OpTimeout <= 0 {
		opt.OpTimeout = 30 * time.Second
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors may quote the URL, password and all.
		return nil, errors.New("postgres: the database URL does not parse (see the libpq connection string format)")
	}
	name := "postgres " + net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))) + "/" + cfg.ConnConfig.Database
	if !identifier.MatchString(opt.Schema) {
		return nil, fmt.Errorf("%s: schema name %q: want letters, digits and _", name, opt.Schema)
	}
	cfg.MaxConns = opt.MaxConns
	// Commits are durable when they return (see Store.Sync), unless the
	// URL chooses another level (remote_apply, for synchronous replicas),
	// or AsyncCommit leaves that to Sync.
	syncLevel, ok := cfg.ConnConfig.RuntimeParams["synchronous_commit"]
	if !ok {
		syncLevel = "on"
	}
	if !syncLevels[syncLevel] {
		return nil, fmt.Errorf("%s: synchronous_commit %q: want one of on, remote_apply, remote_write, local, off", name, syncLevel)
	}
	if syncLevel == "off" { // the URL asks for it: Sync keeps its promise
		syncLevel, opt.AsyncCommit = "on", true
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = syncLevel
	// Every statement of this store reads kv by its primary key (one key,
	// a few, a range, or a key named by another row's value), so the one
	// right plan is an index scan, joined by nested loop. A plan the
	// server caches for a prepared statement is made from what the table
	// held then: made on a small table, a sequential scan or a hash join
	// reads every row once the table is large (pgbench measured a lookup
	// at 1.5 ms instead of 0.13). Turning those off for these sessions
	// keeps every plan an index plan whatever the table held when it was
	// made.
	for _, param := range []string{"enable_seqscan", "enable_hashjoin", "enable_mergejoin"} {
		if _, set := cfg.ConnConfig.RuntimeParams[param]; !set {
			cfg.ConnConfig.RuntimeParams[param] = "off"
		}
	}
	if opt.AsyncCommit {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	if opt.AsyncCommit {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			var started string
			if err := c.QueryRow(ctx, "SELECT pg_postmaster_start_time()::text").Scan(&started); err != nil {
				return fmt.Errorf("which run of the database (AsyncCommit needs pg_postmaster_start_time): %w", err)
			}
			c.PgConn().CustomData()[instanceKey] = started
			return nil
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s := &Store{pool: pool, name: name, opt: opt, sql: newStatements(opt.Schema), syncLevel: syncLevel, unsynced: map[string]bool{}, guesses: newGuesses()}
	s.mark = make([]byte, 16)
	crand.Read(s.mark)
	if err := s.prepareSchema(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// prepareSchema checks the schema's version, creating the schema first
// when it does not exist.
//
// The tables are created in one transaction of plain DDL (no advisory
// lock), so no server ever sees a schema without its version row. Two
// servers creating it at once may collide in the catalog (a unique
// violation, or a serialization failure on databases that serialize DDL);
// the loser tries again and then finds the winner's schema.
func (s *Store) prepareSchema(ctx context.Context) error {
	schema := pgx.Identifier{s.opt.Schema}.Sanitize()
	version := pgx.Identifier{s.opt.Schema, "schema_version"}.Sanitize()
	table := pgx.Identifier{s.opt.Schema, "kv"}.Sanitize()
	for attempt := 0; ; attempt++ {
		var got int
		err := s.pool.QueryRow(ctx, "SELECT version FROM "+version).Scan(&got)
		if err == nil {
			if got != SchemaVersion {
				return fmt.Errorf("%s: database schema %s is version %d; this bucketfs needs %d", s.name, s.opt.Schema, got, SchemaVersion)
			}
			return nil
		}
		var pgErr *pgconn.PgError
		missing := errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") // undefined table, schema
		if !missing && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s: read the schema version: %w", s.name, err)
		}
		err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
			for _, ddl := range []string{
				"CREATE SCHEMA IF NOT EXISTS " + schema,
				// One row: the version of every table in the schema.
				"CREATE TABLE IF NOT EXISTS " + version + " (one boolean PRIMARY KEY DEFAULT true CHECK (one), version integer NOT NULL)",
				// bytea compares bytewise (memcmp, then length): the kv order.
				"CREATE TABLE IF NOT EXISTS " + table + " (k bytea PRIMARY KEY, v bytea NOT NULL)",
				// One row per open store with AsyncCommit, which its Sync
				// writes: no row that every server writes.
				"CREATE TABLE IF NOT EXISTS " + pgx.Identifier{s.opt.Schema, "sync_marks"}.Sanitize() + " (store bytea PRIMARY KEY, n bigint NOT NULL)",
			} {
				if _, err := tx.Exec(ctx, ddl); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+version+" (one, version) VALUES (true, $1) ON CONFLICT (one) DO NOTHING", SchemaVersion)
			return err
		})
		if err != nil {
			if attempt < 5 && errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06" || pgErr.Code == "42P07" || retryable(pgErr)) {
				continue // another server created it at the same time
			}
			return fmt.Errorf("%s: create schema %s: %w", s.name, s.opt.Schema, err)
		}
	}
}

// retryable reports whether a server error means the transaction was rolled
// back for a reason that running it again may not meet: a serialization
// failure or a deadlock between transactions, or the server going away.
func retryable(e *pgconn.PgError) bool {
	switch e.Code {
	case "40001", "40P01", // serialization_failure, deadlock_detected
		"57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return true
	}
	return e.Code[:2] == "08" // connection exception
}

// backoff waits before attempt n+1 of an Update: exponential from 1ms to
// MaxBackoff, jittered so that transactions that conflicted do not meet
// again in step.
func (s *Store) backoff(ctx context.Context, n int) error {
	d := min(time.Millisecond<<min(n, 20), s.opt.MaxBackoff)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sync implements kv.Store.
//
// Without AsyncCommit every Update is durable when it returns: its COMMIT
// waits for the write-ahead log to be flushed (synchronous_commit on, set
// by Open unless the URL chooses another level), so Sync has nothing to
// do.
//
// With AsyncCommit, Sync commits a write of this store's row in
// sync_marks at the synchronous level. Its COMMIT returns once the log is
// flushed up to its commit record, and the log is one sequence: that
// flushes every commit record before it, which includes every Update that
// returned before Sync was called, and every commit of any server that
// this one saw (a commit's record is in the log before the commit is
// visible).
//
// That holds only while the database runs on. Commits made on a run of
// the database that has ended (it crashed, or restarted) may be lost, and
// the flush of another run's log says nothing of them: when some Update
// since the last Sync began committed on another run than the one Sync's
// commit reached, Sync fails with an error wrapping kv.ErrUnknownOutcome,
// and so does every Sync after it (which writes were lost is unknown; the
// store must be opened again).
func (s *Store) Sync(ctx context.Context) error {
	if err := ctx.Err(); err != nil || !s.opt.AsyncCommit {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opt.OpTimeout)
	defer cancel()
	s.stats.syncs.Add(1)
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return s.lost
	}
	pending := s.unsynced
	s.unsynced = map[string]bool{}
	s.mu.Unlock()
	reached, err := s.syncMark(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil { // still to be made durable by a later Sync
		for run := range pending {
			s.unsynced[run] = true
		}
		return err
	}
	for run := range pending {
		if run != reached {
			s.lost = fmt.Errorf("%s: sync: the database restarted since commits not yet made durable: %w (they may be lost; open the store again)", s.name, kv.ErrUnknownOutcome)
			return s.lost
		}
	}
	return nil
}

// syncMark commits a write of the store's row at the synchronous level
// and returns the run of the database it reached.
func (s *Store) syncMark(ctx context.Context) (run string, err error) {
	for attempt := 0; ; attempt++ {
		pc, err := s.pool.Acquire(ctx)
		if err == nil {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue("SET LOCAL synchronous_commit = " + s.syncLevel)
			b.Queue(s.sql.syncMark, s.mark)
			b.Queue("COMMIT")
			s.stats.roundTrips.Add(1)
			err = pc.SendBatch(ctx, b).Close()
			run = instanceOf(pc.Conn())
			pc.Release()
			if err == nil {
				return run, nil
			}
		}
		// Whatever the outcome of a failed Sync, doing it again is safe:
		// again after a conflict or a lost connection, until ctx ends.
		var pgErr *pgconn.PgError
		if ctx.Err() != nil || errors.As(err, &pgErr) && !retryable(pgErr) {
			return "", fmt.Errorf("%s: sync: %w", s.name, err)
		}
		if werr := s.backoff(ctx, attempt); werr != nil {
			return "", fmt.Errorf("%s: sync: %w (last: %v)", s.name, werr, err)
		}
	}
}

// Close implements kv.Store: it closes every connection of the pool.
func (s *Store) Close() error {
	s.ending.Wait()
	if s.opt.AsyncCommit {
		ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		s.pool.Exec(ctx, s.sql.dropMark, s.mark) // a row left behind is harmless
		cancel()
	}
	s.pool.Close()
	return nil
}

// View implements kv.Store with a REPEATABLE READ READ ONLY transaction,
// begun with its first read (in the same round trip) and ended in the
// background (endLater).
func (s *Store) View(ctx context.Context, fn func(r kv.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opt.OpTimeout)
	defer cancel()
	s.stats.views.Add(1)
	r, err := s.newReader(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	if err != nil {
		return fmt.Errorf("%s: view: %w", s.name, err)
	}
	r.remember, r.feed = true, true
	defer s.endLater(r)
	return fn(r)
}

// endLater ends a View's transaction and gives its connection back to the
// pool in the background, so the View returns without waiting for the
// COMMIT's answer. Nothing depends on that answer: the transaction is
// READ ONLY and REPEATABLE READ, so its COMMIT cannot fail a check, and
// every row fn was given had already arrived. If the COMMIT fails (the
// connection lost), the pool closes the connection, still in a
// transaction, instead of reusing it. Close waits for these to finish.
func (s *Store) endLater(r *reader) {
	if !r.begun || r.closed() {
		r.release()
		return
	}
	s.ending.Add(1)
	go func() {
		defer s.ending.Done()
		r.endCounted(&s.stats.unwaited) // on failure the pool drops the connection
		r.release()
	}()
}

// Snapshot implements kv.Store: one connection, held until Close, in a
// REPEATABLE READ READ ONLY transaction whose snapshot is taken at once.
// Its reads take turns on that connection (a Scan between pages), which
// keeps the state the same for all of them on any PostgreSQL-compatible
// database; an exported snapshot (pg_export_snapshot) would let reads run
// in parallel on several connections, but only on PostgreSQL itself, and
// the exporter, its user, reads one file's blocks in order anyway.
func (s *Store) Snapshot(ctx context.Context) (kv.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := s.newReader(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	if err != nil {
		return nil, fmt.Errorf("%s: snapshot: %w", s.name, err)
	}
	// The reads of a Snapshot have no context of their own: the one given
	// here may end as soon as Snapshot returns.
	r.ctx, r.readTimeout = context.Background(), s.opt.OpTimeout
	// The snapshot is taken by the first statement after BEGIN.
	if err := r.read(ctx, func(pgx.Rows) error { return nil }, "SELECT 1"); err != nil {
		r.end()
		r.release()
		return nil, fmt.Errorf("%s: snapshot: %w", s.name, err)
	}
	return &snapshot{r: r}, nil
}

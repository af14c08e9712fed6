package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"bucketfs/internal/kv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// reader reads the store inside one transaction on one connection. The
// transaction begins with the first read, whose BEGIN travels in the same
// round trip. It is the Reader of a View, the committed side of an Update,
// and the connection of a Snapshot.
type reader struct {
	s     *Store
	ctx   context.Context
	pc    *pgxpool.Conn // the connection, from the pool; see release
	begin string        // BEGIN with the transaction's isolation level
	begun bool
	// readTimeout, if set, bounds each read: a Snapshot's reads have no
	// context of their own (Options.OpTimeout).
	readTimeout time.Duration
	// fetched holds what Prefetch read, and, when remember is set, what
	// each Get read: for each key, its committed value (nil: no row). The
	// transaction has one snapshot (REPEATABLE READ or SERIALIZABLE), so a
	// later read of the key would return the same; get answers from it.
	// A Snapshot does not remember its Gets: it lasts long and reads a
	// file's blocks once each.
	fetched  map[string][]byte
	remember bool
	// feed makes what this transaction reads from the database guesses
	// for later Updates (a View's or an Update's; not a Snapshot's, which
	// may be old). See guess.go.
	feed bool
	// guess lets reads take values from the store's guesses (an Update's
	// first run); guessed holds the values they took, which the
	// transaction checks before it commits (guess.go's invariant).
	guess   bool
	guessed map[string][]byte
}

// errNoConnection is the error of a read after the reader lost its
// connection and could not get another.
var errNoConnection = errors.New("no connection to the database")

// endTimeout bounds the COMMIT or ROLLBACK that ends a transaction whose
// context has ended, so that a server that stopped answering cannot hold a
// caller for ever.
const endTimeout = 10 * time.Second

// newReader takes a connection from the pool for a transaction begun with
// begin.
func (s *Store) newReader(ctx context.Context, begin string) (*reader, error) {
	pc, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &reader{s: s, ctx: ctx, pc: pc, begin: begin}, nil
}

func (r *reader) conn() *pgx.Conn { return r.pc.Conn() }

// closed reports whether the reader has lost its connection (or failed to
// get another one).
func (r *reader) closed() bool { return r.pc == nil || r.pc.Conn().IsClosed() }

// release gives the connection back to the pool, which closes it if it
// is broken or still in a transaction.
func (r *reader) release() {
	if r.pc != nil {
		r.pc.Release()
		r.pc = nil
	}
}

// read runs one query (after BEGIN, when the transaction has not begun)
// and calls each for every row. Row values are valid only during each.
//
// A pooled connection may have died since its last use (the server
// restarted) without the pool knowing. When the first read of a
// transaction finds its connection closed, nothing has been read or
// written yet, so read takes another connection and tries again; when
// connecting itself fails, the error is returned.
func (r *reader) read(ctx context.Context, each func(pgx.Rows) error, sql string, args ...any) error {
	if r.pc == nil {
		return errNoConnection
	}
	if r.readTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.readTimeout)
		defer cancel()
	}
	for tries := 0; ; tries++ {
		err := r.readOnce(ctx, each, sql, args...)
		if err == nil || r.begun || !r.closed() || ctx.Err() != nil || tries > int(r.s.opt.MaxConns) {
			return err
		}
		r.release()
		if r.pc, err = r.s.acquire(ctx); err != nil {
			return err
		}
	}
}

// acquire takes a connection from the pool. While the database cannot be
// reached (down, restarting) it tries again, after growing pauses, until
// ctx ends: a transaction that has read nothing yet waits for the
// database rather than failing at once (Options.OpTimeout bounds it).
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, error) {
	for attempt := 0; ; attempt++ {
		pc, err := s.pool.Acquire(ctx)
		var ce *pgconn.ConnectError
		if err == nil || ctx.Err() != nil || !errors.As(err, &ce) {
			return pc, err
		}
		if werr := s.backoff(ctx, attempt); werr != nil {
			return nil, fmt.Errorf("%w (last: %v)", werr, err)
		}
	}
}

func (r *reader) readOnce(ctx context.Context, each func(pgx.Rows) error, sql string, args ...any) error {
	r.s.stats.roundTrips.Add(1)
	var rows pgx.Rows
	var br pgx.BatchResults
	if r.begun {
		var err error
		if rows, err = r.conn().Query(ctx, sql, args...); err != nil {
			return err
		}
	} else {
		b := &pgx.Batch{}
		b.Queue(r.begin)
		b.Queue(sql, args...)
		br = r.conn().SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		r.begun = true
		var err error
		if rows, err = br.Query(); err != nil {
			br.Close()
			return err
		}
	}
	var err error
	for rows.Next() {
		if err = each(rows); err != nil {
			break
		}
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if br != nil {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// end closes the transaction, if one began: COMMIT, so that a
// SERIALIZABLE one is checked too. The caller releases the connection.
func (r *reader) end() error { return r.endCounted(&r.s.stats.roundTrips) }

// endCounted is end, counting its statement in count (Stats).
func (r *reader) endCounted(count *atomic.Int64) error {
	if !r.begun || r.closed() {
		return nil
	}
	r.begun = false
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), endTimeout)
	defer cancel()
	count.Add(1)
	_, err := r.conn().Exec(ctx, "COMMIT")
	return err
}

// get returns a copy of the committed value of key.
func (r *reader) get(key []byte) ([]byte, error) {
	v, ok := r.fetched[string(key)]
	if !ok {
		v, ok = r.fromGuess(key)
	}
	if ok {
		v = bytes.Clone(v) // nil stays nil: no row
	} else {
		var err error
		if v, err = r.fetch(key); err != nil {
			return nil, err
		}
		if r.remember {
			r.learned(key, v)
			v = bytes.Clone(v)
		}
	}
	if v == nil {
		return nil, kv.ErrNotFound
	}
	return v, nil
}

// fetch reads the committed value of key from the database: a copy, nil
// when there is no row.
func (r *reader) fetch(key []byte) ([]byte, error) {
	var v []byte
	err := r.read(r.ctx, func(rows pgx.Rows) error {
		v = bytes.Clone(rows.RawValues()[0])
		if v == nil {
			v = []byte{} // a row, empty: not a missing one
		}
		return nil
	}, r.s.sql.get, key)
	return v, err
}

// prefetch reads the committed values of the keys not read ahead yet, in
// one round trip, into r.fetched; nothing is kept when the read fails.
func (r *reader) prefetch(keys [][]byte) error {
	ask := r.unread(keys)
	if r.guess {
		ask = slices.DeleteFunc(ask, func(k []byte) bool { _, ok := r.fromGuess(k); return ok })
	}
	if len(ask) == 0 {
		return nil
	}
	if len(ask) == 1 {
		// One key: the statement Get uses, prepared already.
		v, err := r.fetch(ask[0])
		if err != nil {
			return err
		}
		r.learned(ask[0], v)
		return nil
	}
	got := make(map[string][]byte, len(ask))
	if err := r.read(r.ctx, rowsInto(got), r.s.sql.getMany, ask); err != nil {
		return err
	}
	for _, k := range ask {
		r.learned(k, got[string(k)])
	}
	return nil
}

// rowsInto is the each of a read of (k, v) rows: it copies them into got.
func rowsInto(got map[string][]byte) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		raw := rows.RawValues()
		v := bytes.Clone(raw[1])
		if v == nil {
			v = []byte{} // a row, empty: not a missing one
		}
		got[string(raw[0])] = v
		return nil
	}
}

// unread returns keys without those read already and without repeats.
func (r *reader) unread(keys [][]byte) [][]byte {
	var ask [][]byte
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if _, ok := r.fetched[string(k)]; !ok && !seen[string(k)] {
			seen[string(k)] = true
			ask = append(ask, k)
		}
	}
	return ask
}

// prefetchRef is prefetch of keys (ref among them) and of the key ref's
// committed value names (kv.RefKey), in one round trip. When ref was read
// already, the key it names is known: a plain prefetch.
func (r *reader) prefetchRef(ref, prefix []byte, n int, keys [][]byte) error {
	if _, ok := r.fetched[string(ref)]; !ok {
		r.fromGuess(ref)
	}
	if v, ok := r.fetched[string(ref)]; ok {
		if target := kv.RefKey(prefix, n, v); target != nil && v != nil {
			keys = append(keys[:len(keys):len(keys)], target)
		}
		return r.prefetch(keys)
	}
	ask := r.unread(append(keys[:len(keys):len(keys)], ref))
	got := make(map[string][]byte, len(ask)+1)
	if err := r.read(r.ctx, rowsInto(got), r.s.sql.getManyRef, ask, ref, prefix, n); err != nil {
		return err
	}
	for _, k := range ask {
		r.learned(k, got[string(k)])
	}
	if v := got[string(ref)]; v != nil {
		if target := kv.RefKey(prefix, n, v); target != nil {
			r.learned(target, got[string(target)])
		}
	}
	return nil
}

// keep records v (nil: no row) as the committed value of key.
func (r *reader) keep(key, v []byte) {
	if r.fetched == nil {
		r.fetched = make(map[string][]byte)
	}
	r.fetched[string(key)] = v
}

// learned keeps v (nil: no row), just read from the database, as the
// committed value of key, and makes it a guess when the reader feeds
// them. v must not change afterwards.
func (r *reader) learned(key, v []byte) {
	r.keep(key, v)
	if r.feed {
		r.s.guesses.put(key, v)
	}
}

// fromGuess answers a read of key from the store's guesses, when the
// reader may guess and one is there: it keeps the value as read, and
// records it among those the transaction must check.
func (r *reader) fromGuess(key []byte) (v []byte, ok bool) {
	if !r.guess {
		return nil, false
	}
	if v, ok = r.s.guesses.get(key); !ok {
		return nil, false
	}
	r.keep(key, v)
	if r.guessed == nil {
		r.guessed = make(map[string][]byte)
	}
	r.guessed[string(key)] = v
	r.s.stats.guessed.Add(1)
	return v, true
}

// page is one read of a Scan: keys and values in order, copied.
type page struct {
	keys, vals [][]byte
}

// scanPage reads up to limit committed rows from lower (or after it, when
// after is set) to upper (nil: no bound).
func (r *reader) scanPage(lower []byte, after bool, upper []byte, limit int) (page, error) {
	var p page
	if lower == nil {
		lower = []byte{}
	}
	sql, args := r.s.sql.scanFrom, []any{lower, limit}
	switch {
	case after && upper != nil:
		sql = r.s.sql.scanAfterTo
	case after:
		sql = r.s.sql.scanAfter
	case upper != nil:
		sql = r.s.sql.scanFromTo
	}
	if upper != nil {
		args = append(args, upper)
	}
	err := r.read(r.ctx, func(rows pgx.Rows) error {
		raw := rows.RawValues()
		v := bytes.Clone(raw[1])
		if v == nil {
			v = []byte{}
		}
		p.keys = append(p.keys, bytes.Clone(raw[0]))
		p.vals = append(p.vals, v)
		return nil
	}, sql, args...)
	return p, err
}

// pages calls fn for every committed row in [lower, upper), reading pages
// that grow from 64 rows to ScanPage, until fn returns false. lock, when
// not nil, is held during each read but not while fn runs.
func (r *reader) pages(lower, upper []byte, lock sync.Locker, fn func(k, v []byte) bool) error {
	if upper != nil && bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	limit, after := min(64, r.s.opt.ScanPage), false
	for {
		if lock != nil {
			lock.Lock()
		}
		p, err := r.scanPage(lower, after, upper, limit)
		if lock != nil {
			lock.Unlock()
		}
		if err != nil {
			return err
		}
		for i := range p.keys {
			if !fn(p.keys[i], p.vals[i]) {
				return nil
			}
		}
		if len(p.keys) < limit {
			return nil
		}
		lower, after = p.keys[len(p.keys)-1], true
		limit = min(2*limit, r.s.opt.ScanPage)
	}
}

// Get implements kv.Reader for a View.
func (r *reader) Get(key []byte) ([]byte, error) {
	v, err := r.get(key)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		return nil, fmt.Errorf("%s: get: %w", r.s.name, err)
	}
	return v, err
}

// Prefetch implements kv.Reader for a View: the keys in one round trip.
func (r *reader) Prefetch(keys ...[]byte) error {
	if err := r.prefetch(keys); err != nil {
		return fmt.Errorf("%s: get: %w", r.s.name, err)
	}
	return nil
}

// PrefetchRef implements kv.Reader for a View: all in one round trip.
func (r *reader) PrefetchRef(ref, prefix []byte, n int, keys ...[]byte) error {
	if err := r.prefetchRef(ref, prefix, n, keys); err != nil {
		return fmt.Errorf("%s: get: %w", r.s.name, err)
	}
	return nil
}

// Scan implements kv.Reader for a View.
func (r *reader) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	if err := r.pages(lower, upper, nil, fn); err != nil {
		return fmt.Errorf("%s: scan: %w", r.s.name, err)
	}
	return nil
}

// snapshot is a kv.Snapshot: a reader whose reads take turns.
type snapshot struct {
	mu     sync.Mutex // held by each read on the connection
	r      *reader
	closed bool
}

func (s *snapshot) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Get(key)
}

func (s *snapshot) Prefetch(keys ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Prefetch(keys...)
}

func (s *snapshot) PrefetchRef(ref, prefix []byte, n int, keys ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.PrefetchRef(ref, prefix, n, keys...)
}

func (s *snapshot) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	if err := s.r.pages(lower, upper, &s.mu, fn); err != nil {
		return fmt.Errorf("%s: scan: %w", s.r.s.name, err)
	}
	return nil
}

// Close ends the snapshot's transaction and gives its connection back.
func (s *snapshot) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.r.end()
	s.r.release()
	if err != nil {
		return fmt.Errorf("%s: close snapshot: %w", s.r.s.name, err)
	}
	return nil
}

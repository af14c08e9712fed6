package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"bucketfs/internal/kv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Update implements kv.Store.
func (s *Store) Update(ctx context.Context, fn func(tx kv.Txn) error) error {
	return s.UpdateSized(ctx, 0, fn)
}

// UpdateSized implements kv.Store. It runs fn in a SERIALIZABLE
// transaction and runs it again, after a jittered pause, when the
// transaction was rolled back by a serialization failure or a deadlock, or
// when the connection was lost before COMMIT was sent; until ctx ends.
// When the connection is lost while COMMIT is under way, the error wraps
// kv.ErrUnknownOutcome and fn is not run again. Options.OpTimeout bounds
// the whole, retries included.
func (s *Store) UpdateSized(ctx context.Context, size int, fn func(tx kv.Txn) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opt.OpTimeout)
	defer cancel()
	s.stats.updates.Add(1)
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		again, err := s.attempt(ctx, fn, attempt == 0)
		if !again {
			return err
		}
		if errors.Is(err, errGuessed) {
			continue // again at once, without guesses
		}
		if werr := s.backoff(ctx, attempt); werr != nil {
			return fmt.Errorf("%s: update gave up after %d attempts (last: %v): %w", s.name, attempt+1, err, werr)
		}
	}
}

// errGuessed is why an Update runs fn again at once, without guesses:
// a guess was wrong, or fn failed after it guessed (guess.go).
var errGuessed = errors.New("an update's guessed read must be read again")

// staleGuess is the text of the check of guesses that fails
// (statements.checkGuesses).
const staleGuess = "bucketfs: a guessed read is stale"

// attempt runs fn once in a transaction and commits it. again reports
// whether the transaction surely did not commit for a reason that may
// pass: then err is why. guess lets fn's reads take guesses.
func (s *Store) attempt(ctx context.Context, fn func(tx kv.Txn) error, guess bool) (again bool, err error) {
	s.stats.attempts.Add(1)
	r, err := s.newReader(ctx, "BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE")
	if err != nil {
		// Connecting failed (the server restarting, say): nothing ran.
		return ctx.Err() == nil, fmt.Errorf("%s: update: %w", s.name, err)
	}
	r.remember, r.feed, r.guess = true, true, guess
	t := &txn{reader: *r, writes: map[string]write{}}
	committed := false
	defer func() {
		if !committed && t.begun && !t.closed() {
			// Rolls back fn's transaction, also when fn panics.
			s.rollbackLater(&t.reader)
			return
		}
		t.release()
	}()
	ferr := fn(t)
	if t.lost != nil {
		// A read failed because the transaction can not go on; whatever fn
		// made of it, run it again.
		return true, fmt.Errorf("%s: update: %w", s.name, t.lost)
	}
	if ferr != nil {
		if len(t.guessed) > 0 {
			// The error may come of a wrong guess: fn runs again
			// without, and says.
			return true, fmt.Errorf("%w: %w", errGuessed, ferr)
		}
		return false, ferr
	}
	if !t.begun && len(t.writes) == 0 && len(t.ranges) == 0 && len(t.guessed) == 0 {
		committed = true
		return false, nil
	}
	again, err = t.commit(ctx)
	if committed = err == nil; committed {
		s.noteCommit(t.conn())
		t.feedWrites()
	}
	return again, err
}

// rollbackLater rolls r's transaction back and gives its connection back
// to the pool in the background, as endLater does a View's COMMIT: no
// caller needs a ROLLBACK's answer (Update runs fn again on another
// connection). If the ROLLBACK fails, the connection is closed rather
// than given back. Close waits for these to finish.
func (s *Store) rollbackLater(r *reader) {
	s.ending.Add(1)
	go func() {
		defer s.ending.Done()
		ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		defer cancel()
		s.stats.unwaited.Add(1)
		if _, err := r.conn().Exec(ctx, "ROLLBACK"); err != nil {
			r.conn().Close(context.Background())
		}
		r.release()
	}()
}

// feedWrites makes the committed writes guesses for later Updates.
func (t *txn) feedWrites() {
	for _, r := range t.ranges {
		t.s.guesses.dropRange(r)
	}
	for k, w := range t.writes {
		if w.deleted {
			t.s.guesses.put([]byte(k), nil)
		} else {
			t.s.guesses.put([]byte(k), w.value)
		}
	}
}

// write is one buffered write of a transaction: a value, or a delete.
type write struct {
	value   []byte
	deleted bool
}

// keyRange is a buffered DeleteRange: [lower, upper).
type keyRange struct{ lower, upper []byte }

func (r keyRange) contains(k []byte) bool {
	return bytes.Compare(k, r.lower) >= 0 && bytes.Compare(k, r.upper) < 0
}

// txn is the kv.Txn of an Update. Its writes are buffered and sent with
// COMMIT in one round trip; its reads merge them over the database's rows.
//
// Invariant: a key in writes was written after every range in ranges that
// covers it (DeleteRange drops the writes it covers), so the database
// state fn sees is: ranges applied to the committed rows, then writes.
type txn struct {
	reader
	writes map[string]write
	ranges []keyRange
	lost   error // a read error that dooms the transaction (conflict, lost connection)
}

// failed records err if it means the transaction must be run again.
func (t *txn) failed(err error) {
	if t.lost != nil {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && retryable(pgErr) || t.closed() && t.ctx.Err() == nil {
		t.lost = err
	}
}

func (t *txn) deletedByRange(k []byte) bool {
	for _, r := range t.ranges {
		if r.contains(k) {
			return true
		}
	}
	return false
}

func (t *txn) Get(key []byte) ([]byte, error) {
	if w, ok := t.writes[string(key)]; ok {
		if w.deleted {
			return nil, kv.ErrNotFound
		}
		return bytes.Clone(w.value), nil
	}
	if t.deletedByRange(key) {
		return nil, kv.ErrNotFound
	}
	v, err := t.get(key)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		t.failed(err)
		return nil, fmt.Errorf("%s: get: %w", t.s.name, err)
	}
	return v, err
}

// Prefetch reads ahead the keys whose Get would reach the database: not
// those the transaction wrote or deleted.
func (t *txn) Prefetch(keys ...[]byte) error {
	if err := t.prefetch(t.unbuffered(keys)); err != nil {
		t.failed(err)
		return fmt.Errorf("%s: get: %w", t.s.name, err)
	}
	return nil
}

// unbuffered returns the keys whose reads reach the database: not those
// the transaction wrote or deleted.
func (t *txn) unbuffered(keys [][]byte) [][]byte {
	out := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if _, ok := t.writes[string(k)]; !ok && !t.deletedByRange(k) {
			out = append(out, k)
		}
	}
	return out
}

// PrefetchRef reads ahead as Prefetch does; when the transaction wrote
// ref, the key its written value names is prefetched instead.
func (t *txn) PrefetchRef(ref, prefix []byte, n int, keys ...[]byte) error {
	if w, ok := t.writes[string(ref)]; ok || t.deletedByRange(ref) {
		if ok && !w.deleted {
			if target := kv.RefKey(prefix, n, w.value); target != nil {
				keys = append(keys[:len(keys):len(keys)], target)
			}
		}
		return t.Prefetch(keys...)
	}
	if err := t.prefetchRef(ref, prefix, n, t.unbuffered(keys)); err != nil {
		t.failed(err)
		return fmt.Errorf("%s: get: %w", t.s.name, err)
	}
	return nil
}

// Scan merges the writes buffered when it starts over the committed rows:
// writes fn makes while it runs are not seen, as the contract says.
func (t *txn) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	var mine []string // buffered keys in range, sorted
	for k := range t.writes {
		if bytes.Compare([]byte(k), lower) >= 0 && (upper == nil || bytes.Compare([]byte(k), upper) < 0) {
			mine = append(mine, k)
		}
	}
	slices.Sort(mine)
	snap := make([]write, len(mine))
	for i, k := range mine {
		snap[i] = t.writes[k]
	}
	ranges := slices.Clone(t.ranges)
	deleted := func(k []byte) bool {
		for _, r := range ranges {
			if r.contains(k) {
				return true
			}
		}
		return false
	}
	i := 0
	// emitMineBefore sends buffered values before k (all when k is nil).
	emitMineBefore := func(k []byte) bool {
		for ; i < len(mine) && (k == nil || mine[i] < string(k)); i++ {
			if !snap[i].deleted && !fn([]byte(mine[i]), snap[i].value) {
				return false
			}
		}
		return true
	}
	stopped := false
	err := t.pages(lower, upper, nil, func(k, v []byte) bool {
		if !emitMineBefore(k) {
			stopped = true
			return false
		}
		if i < len(mine) && mine[i] == string(k) {
			w := snap[i]
			i++
			if w.deleted {
				return true
			}
			if !fn(k, w.value) {
				stopped = true
				return false
			}
			return true
		}
		if deleted(k) {
			return true
		}
		if !fn(k, v) {
			stopped = true
			return false
		}
		return true
	})
	if err != nil {
		t.failed(err)
		return fmt.Errorf("%s: scan: %w", t.s.name, err)
	}
	if !stopped {
		emitMineBefore(nil)
	}
	return nil
}

func (t *txn) Set(key, value []byte) error {
	v := make([]byte, len(value)) // never nil: the column is NOT NULL
	copy(v, value)
	t.writes[string(key)] = write{value: v}
	return nil
}

func (t *txn) SetWith(key []byte, n int, fill func(value []byte)) error {
	v := make([]byte, n)
	fill(v)
	t.writes[string(key)] = write{value: v}
	return nil
}

func (t *txn) Delete(key []byte) error {
	t.writes[string(key)] = write{deleted: true}
	return nil
}

func (t *txn) DeleteRange(lower, upper []byte) error {
	if upper == nil {
		return errors.New("kv: delete range: upper bound required")
	}
	r := keyRange{bytes.Clone(lower), bytes.Clone(upper)}
	if r.lower == nil {
		r.lower = []byte{}
	}
	for k := range t.writes {
		if r.contains([]byte(k)) {
			delete(t.writes, k)
		}
	}
	t.ranges = append(t.ranges, r)
	return nil
}

// commit sends the buffered writes and COMMIT in one batch (with BEGIN in
// front when fn read nothing) and reads the results in order. A server
// error on a statement before COMMIT proves the transaction rolled back:
// the server skips the rest of a failed batch (or, for a FATAL one, ends
// the session); so does an ERROR answer to COMMIT itself. A FATAL answer
// to COMMIT (the server shutting down) may come after the commit record
// was flushed. Without a server answer for COMMIT, the outcome is
// known only if pgx tells that nothing of the batch was sent.
func (t *txn) commit(ctx context.Context) (again bool, err error) {
	if t.pc == nil { // lost with fn's reads, and ctx ended: nothing sent
		return false, fmt.Errorf("%s: commit: %w", t.s.name, errors.Join(errNoConnection, ctx.Err()))
	}
	if !t.begun && peerClosed(t.conn()) {
		// Nothing sent on this connection yet: nothing can commit.
		t.conn().Close(context.Background())
		return ctx.Err() == nil, fmt.Errorf("%s: commit not sent: %w", t.s.name, errPeerClosed)
	}
	b := &pgx.Batch{}
	if !t.begun {
		b.Queue(t.begin)
	}
	check := -1 // the statement that checks the guesses
	if len(t.guessed) > 0 {
		keys, vals := make([][]byte, 0, len(t.guessed)), make([][]byte, 0, len(t.guessed))
		for k, v := range t.guessed {
			keys, vals = append(keys, []byte(k)), append(vals, v)
		}
		check = b.Len()
		b.Queue(t.s.sql.checkGuesses, keys, vals)
	}
	for _, r := range t.ranges {
		b.Queue(t.s.sql.deleteRange, r.lower, r.upper)
	}
	var setKeys, setVals, delKeys [][]byte
	// In key order, so that two transactions writing the same rows lock
	// them in the same order instead of deadlocking.
	for _, k := range slices.Sorted(maps.Keys(t.writes)) {
		w := t.writes[k]
		if w.deleted {
			delKeys = append(delKeys, []byte(k))
		} else {
			setKeys, setVals = append(setKeys, []byte(k)), append(setVals, w.value)
		}
	}
	if len(delKeys) > 0 {
		b.Queue(t.s.sql.deleteMany, delKeys)
	}
	switch {
	case len(setKeys) == 1:
		b.Queue(t.s.sql.setOne, setKeys[0], setVals[0])
	case len(setKeys) > 1:
		b.Queue(t.s.sql.setMany, setKeys, setVals)
	}
	b.Queue("COMMIT")
	t.begun = true // from here on a ROLLBACK is due if COMMIT did not end it
	t.s.stats.roundTrips.Add(1)
	br := t.conn().SendBatch(ctx, b)
	var stmtErr error
	failed := 0 // the statement that failed
	for ; failed < b.Len(); failed++ {
		if _, err := br.Exec(); err != nil {
			stmtErr = err
			break
		}
	}
	closeErr := br.Close()
	if stmtErr == nil {
		stmtErr = closeErr
	}
	if stmtErr == nil {
		return false, nil
	}
	var pgErr *pgconn.PgError
	switch {
	case failed == check && errors.As(stmtErr, &pgErr) && pgErr.Code == "22P02": // invalid_text_representation
		// A guess was wrong: rolled back, to be run again without.
		t.s.stats.stale.Add(1)
		t.s.guesses.drop(t.guessed)
		return true, fmt.Errorf("%s: commit: %w: %w", t.s.name, errGuessed, stmtErr)
	case errors.As(stmtErr, &pgErr) && (pgErr.Severity == "ERROR" || failed < b.Len()-1):
		// An ERROR, or a FATAL answer to a statement before COMMIT (the
		// server ended the session without reading on): rolled back.
		return retryable(pgErr), fmt.Errorf("%s: commit: %w", t.s.name, stmtErr)
	case pgconn.SafeToRetry(stmtErr):
		return ctx.Err() == nil, fmt.Errorf("%s: commit not sent: %w", t.s.name, stmtErr)
	}
	return false, fmt.Errorf("%s: %w: %w", t.s.name, kv.ErrUnknownOutcome, stmtErr)
}

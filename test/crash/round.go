package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"bucketfs/internal/pgtest"
)

// roundResult is what one round found.
type roundResult struct {
	seed       uint64
	plan       string
	steps      int
	lostFound  int
	violations []violation
	m          *model
	keptDir    string // the round's directory, when kept
	err        error  // the round could not be run (not a rule broken)
}

func (r *roundResult) failed() bool { return len(r.violations) > 0 || r.err != nil }

// runRound runs one round: a fresh state directory (and, for the separate
// store, a fresh store), the writer, the kill, the restart and every check.
// Rounds never continue on an earlier round's state, so a seed replays its
// round alone.
func runRound(ctx context.Context, cfg *config, store string, seed uint64) (res *roundResult) {
	res = &roundResult{seed: seed}
	dir, err := os.MkdirTemp(cfg.workDir, fmt.Sprintf("crash-%s-%d-", store, seed))
	if err != nil {
		res.err = err
		return res
	}
	defer func() {
		if cfg.keep && res.failed() {
			res.keptDir = dir
			return
		}
		os.RemoveAll(dir)
	}()
	p := &fsProc{bin: cfg.bin, stateDir: filepath.Join(dir, "state"), mnt: filepath.Join(dir, "mnt"),
		logPath: filepath.Join(dir, "bucketfs.log")}
	if err := os.Mkdir(p.mnt, 0o755); err != nil {
		res.err = err
		return res
	}
	if store == "separate" || store == "postgres" {
		addr, err := freeAddr()
		if err != nil {
			res.err = err
			return res
		}
		st, err := startStore(ctx, filepath.Join(dir, "store"), addr, filepath.Join(dir, "store.log"))
		if err != nil {
			res.err = fmt.Errorf("separate store: %w", err)
			return res
		}
		defer st.stop()
		p.storeArgs = []string{"--bucket", "s3://" + st.env["BUCKETFS_BUCKET"], "--endpoint", st.env["AWS_ENDPOINT_URL"]}
		for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} {
			p.env = append(p.env, k+"="+st.env[k])
		}
		if store == "postgres" {
			// The metadata and unexported data on a PostgreSQL server of
			// the round's own (fsync on), which the kill may take along.
			pg, err := pgtest.Launch()
			if err != nil {
				res.err = err
				return res
			}
			defer pg.Remove()
			url, err := pg.Database("crash")
			if err != nil {
				res.err = err
				return res
			}
			p.pg = pg
			p.storeArgs = append(p.storeArgs, "--meta", url)
		}
	} else {
		addr, err := freeAddr() // kept across the restart
		if err != nil {
			res.err = err
			return res
		}
		p.storeArgs = []string{"--s3-listen", addr}
	}
	defer p.stop()
	res.err = crashAndCheck(ctx, cfg, p, seed, res)
	return res
}

// crashAndCheck runs the writer, kills bucketfs by the round's plan,
// restarts it and checks every rule.
func crashAndCheck(ctx context.Context, cfg *config, p *fsProc, seed uint64, res *roundResult) error {
	if err := p.start(ctx); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(p.mnt, subdir), 0o755); err != nil {
		return err
	}
	if err := fsyncPath(p.mnt); err != nil {
		return err
	}
	envPath := filepath.Join(p.stateDir, "s3.env")
	if p.storeArgs[0] == "--bucket" {
		envPath = filepath.Join(filepath.Dir(p.stateDir), "store", "s3.env")
	}
	env, err := readEnv(envPath)
	if err != nil {
		return err
	}
	c, bucket := s3Client(env), env["BUCKETFS_BUCKET"]
	stopWatch := make(chan struct{})
	watched := watchVersions(c, bucket, stopWatch, p.storeArgs[0] == "--bucket")
	defer func() {
		select {
		case <-stopWatch:
		default:
			close(stopWatch)
		}
	}()

	m := newModel()
	res.m = m
	var crashing, stop atomic.Bool
	w := &writer{m: m, mnt: p.mnt, rng: rand.New(rand.NewPCG(seed, 1)), crashing: &crashing, stop: &stop, big: cfg.big}
	writerDone := make(chan error, 1)
	go func() { writerDone <- w.run() }()
	plan := choosePlan(rand.New(rand.NewPCG(seed, 2)), cfg.maxWrite)
	if cfg.plan != "" {
		plan.kind = cfg.plan
	}
	// With PostgreSQL, half the rounds kill it too, right after bucketfs,
	// as the loss of a machine that runs both would: what was committed
	// must come back from its write-ahead log.
	dbRNG := rand.New(rand.NewPCG(seed, 3))
	killDB := p.pg != nil && dbRNG.IntN(2) == 0
	// With PostgreSQL, half the rounds also crash it alone while the
	// writer runs, and start it again after up to 1 s: bucketfs stays up.
	// Calls made meanwhile must wait for the database and succeed, unless
	// it stays away longer than bucketfs's operation timeout (30 s; the
	// round says when it was back): then EIO is the answer. Everything
	// acknowledged before, during and after must come back as in any
	// round.
	var outage *dbOutage
	if p.pg != nil && dbRNG.IntN(2) == 0 {
		outage = &dbOutage{
			at:   time.Duration(dbRNG.Int64N(int64(plan.write))).Round(time.Millisecond),
			down: time.Duration(dbRNG.Int64N(int64(time.Second))).Round(time.Millisecond),
		}
	}
	res.plan = plan.String()
	if outage != nil {
		res.plan = outage.String() + "; " + res.plan
	}
	if killDB {
		res.plan += ", PostgreSQL killed with it"
	}
	outageDone := outage.run(ctx, p.pg)
	planErr := plan.run(ctx, p, m, &stop, writerDone, outageDone)
	crashing.Store(true)
	killErr := p.kill9()
	if killDB {
		p.pg.Kill()
		killErr = errors.Join(killErr, p.pg.StartAgain())
	}
	select {
	case <-writerDone:
	case <-time.After(30 * time.Second): // its call hangs: freeze counts it in flight
	}
	m.freeze()
	close(stopWatch)
	seen := <-watched
	res.steps = len(m.journal)
	if err := errors.Join(planErr, killErr); err != nil {
		return err
	}
	for _, s := range m.writerErrors {
		if outage.excuses(s) {
			continue
		}
		res.violations = append(res.violations, violation{rule: ruleWriter, file: firstOr(s.files, -1),
			expected: "the call succeeds", read: s.String()})
	}
	if outage != nil {
		res.plan += fmt.Sprintf(" (the database was back after %v)", time.Duration(outage.over.Load()).Round(time.Millisecond))
	}

	if err := p.start(ctx); err != nil {
		res.violations = append(res.violations, violation{rule: ruleRestart, file: -1, read: err.Error()})
		return nil
	}
	if err := setExported(ctx, c, bucket, m, seen); err != nil {
		return err
	}
	obs, err := observe(p.mnt)
	if err != nil {
		res.violations = append(res.violations, violation{rule: ruleReal, file: -1, read: err.Error(),
			expected: "the mount can be listed"})
		return nil
	}
	res.lostFound = len(obs.lostFound)
	res.violations = append(res.violations, checkMount(m, obs)...)

	if err := p.flush(ctx); err != nil {
		res.violations = append(res.violations, violation{rule: ruleConverged, file: -1,
			expected: "bucketfs flush succeeds", read: err.Error()})
	} else {
		after, err := observe(p.mnt) // what the mount shows now, to compare with the bucket
		if err != nil {
			return err
		}
		vs, err := checkConverged(ctx, c, bucket, m, after)
		if err != nil {
			return err
		}
		res.violations = append(res.violations, vs...)
	}
	vs, err := checkBucketVersions(ctx, c, bucket, m)
	res.violations = append(res.violations, vs...)
	return err
}

// fsyncPath opens path and fsyncs it. It runs on an ordinary thread, where
// the Go runtime's preemption signal can interrupt the FUSE request (EINTR):
// both calls are retried then, as opening and syncing again is harmless.
func fsyncPath(path string) error {
	var fd int
	var err error
	for fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == unix.EINTR; {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for err = unix.Fsync(fd); err == unix.EINTR; {
		err = unix.Fsync(fd)
	}
	return err
}

// A dbOutage crashes PostgreSQL alone (kill -9 of all its processes)
// while bucketfs runs, and starts it again.
type dbOutage struct {
	at   time.Duration // after this much of the writer's run
	down time.Duration // how long the database stays down
	// over is when, since the writer's start, the database accepted
	// connections again (its crash recovery can take tens of seconds on
	// a busy disk). Set once run's channel has its answer.
	over atomic.Int64 // a time.Duration
	// killed is when, since the writer's start, the kill was done.
	killed atomic.Int64 // a time.Duration
}

// excuses reports whether a call that failed, s, may fail so, with EIO:
//   - begun while the kill was under way (from 100 ms before it to 100 ms
//     after): its commit may have been cut, and a commit whose outcome
//     cannot be known is an error (kv.ErrUnknownOutcome), not repeated;
//   - begun more than 20 s before the database was back, as bucketfs
//     answers once its operation timeout (30 s) has run out while the
//     database is away.
//
// Any other call the database was back for must succeed.
func (o *dbOutage) excuses(s step) bool {
	if o == nil || !strings.Contains(s.outcome, "input/output error") {
		return false
	}
	over, killed := time.Duration(o.over.Load()), time.Duration(o.killed.Load())
	const slack = 100 * time.Millisecond
	return killed > 0 && s.at >= o.at-slack && s.at <= killed+slack ||
		over > 0 && s.at < over-20*time.Second
}

func (o *dbOutage) String() string {
	return fmt.Sprintf("PostgreSQL crashed alone after %v of writing and down %v", o.at, o.down)
}

// run starts the outage in the background; the channel gets its error
// (nil at once for no outage). The database is up again when it is sent.
func (o *dbOutage) run(ctx context.Context, pg *pgtest.Server) <-chan error {
	done := make(chan error, 1)
	if o == nil {
		done <- nil
		return done
	}
	start := time.Now()
	go func() {
		if err := sleep(ctx, o.at); err != nil {
			done <- err
			return
		}
		pg.Kill()
		o.killed.Store(int64(time.Since(start)))
		err := errors.Join(sleep(ctx, o.down), pg.StartAgain())
		o.over.Store(int64(time.Since(start)))
		done <- err
	}()
	return done
}

// A killPlan says when the round kills bucketfs.
type killPlan struct {
	kind  string        // midWrite, midExport, checkpoint, quiet
	write time.Duration // how long the writer runs first
	quiet time.Duration // quiet: how long to wait after the writer stopped
}

func (k killPlan) String() string {
	s := fmt.Sprintf("%s after %v of writing", k.kind, k.write)
	if k.kind == "quiet" {
		s += fmt.Sprintf(" and %v of quiet", k.quiet)
	}
	return s
}

// choosePlan draws the round's kill plan:
//   - midWrite: kill while a call of the writer is in flight;
//   - midExport: stop the writer, kill as soon as bucketfs sends the next
//     write request to the store (an upload, copy or delete under way);
//   - checkpoint: kill right after a checkpoint finishes, writer running;
//   - quiet: stop the writer, kill 0 to 1.5 s later (before, during or after
//     the exports and the next checkpoint).
func choosePlan(rng *rand.Rand, maxWrite time.Duration) killPlan {
	k := killPlan{write: 200*time.Millisecond + time.Duration(rng.Int64N(int64(maxWrite-200*time.Millisecond)))}
	k.write = k.write.Round(time.Millisecond)
	switch r := rng.IntN(100); {
	case r < 35:
		k.kind = "midWrite"
	case r < 65:
		k.kind = "midExport"
	case r < 85:
		k.kind = "checkpoint"
	default:
		k.kind = "quiet"
		k.quiet = time.Duration(rng.Int64N(int64(1500 * time.Millisecond))).Round(time.Millisecond)
	}
	return k
}

// run lets the writer run and returns at the moment to kill.
// outageDone says when a crash of PostgreSQL alone is over (the database
// up again): the plan waits for it after the writer's first run, before
// it looks at bucketfs's status or stops the writer, which would not see
// or cover the outage otherwise.
func (k killPlan) run(ctx context.Context, p *fsProc, m *model, stop *atomic.Bool, writerDone chan error, outageDone <-chan error) error {
	if err := sleep(ctx, k.write); err != nil {
		return err
	}
	if err := <-outageDone; err != nil {
		return fmt.Errorf("crash PostgreSQL alone: %w", err)
	}
	stopWriter := func() error {
		stop.Store(true)
		select {
		case err := <-writerDone:
			writerDone <- err // for the caller
			return nil
		case <-time.After(2 * time.Minute):
			return errors.New("the writer did not stop within 2 minutes")
		}
	}
	switch k.kind {
	case "midWrite":
		// The model's lock is free only while the writer is in a
		// system call (then pending is set) or pausing; a writer that
		// ended (a failed call) has nothing in flight, and after 3 s the
		// kill comes anyway.
		poll(ctx, 3*time.Second, "a call in flight", func() (bool, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return m.pending != nil, nil
		})
		return ctx.Err()
	case "midExport":
		if err := stopWriter(); err != nil {
			return err
		}
		st, err := statusWhenUp(ctx, p.stateDir)
		if err != nil {
			return err
		}
		// No export may be left: then the kill lands 3 s later.
		err = poll(ctx, 3*time.Second, "an export request", func() (bool, error) {
			now, err := status(ctx, p.stateDir)
			return err == nil && now.writes() > st.writes(), nil
		})
		if err != nil && ctx.Err() != nil {
			return err
		}
	case "checkpoint":
		st, err := statusWhenUp(ctx, p.stateDir)
		if err != nil {
			return err
		}
		return poll(ctx, 10*time.Second, "a checkpoint", func() (bool, error) {
			now, err := status(ctx, p.stateDir)
			return err == nil && now.LastCheckpoint.After(st.LastCheckpoint), nil
		})
	case "quiet":
		if err := stopWriter(); err != nil {
			return err
		}
		return sleep(ctx, k.quiet)
	}
	return nil
}

// statusWhenUp is status, asked again for up to 30 s while it fails: in a
// round that crashes PostgreSQL alone, status cannot read the database
// until it is back (a 500 from the admin socket).
func statusWhenUp(ctx context.Context, stateDir string) (st adminStatus, err error) {
	perr := poll(ctx, 30*time.Second, "bucketfs status", func() (bool, error) {
		st, err = status(ctx, stateDir)
		return err == nil, nil
	})
	return st, errors.Join(perr, err)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// runNoCrash checks the checker: the writer runs for d on a fresh mount,
// stops, and every file must show exactly its last state (no kill, so
// nothing else is allowed). A violation there is a bug of the writer's
// model (or of the engine outside crashes). Then, after a flush, it runs
// the bucket checks, which tell whether a bucket violation of the crash
// rounds needs a crash at all.
func runNoCrash(ctx context.Context, cfg *config, seed uint64, d time.Duration) (mount, bucket []violation, err error) {
	dir, err := os.MkdirTemp(cfg.workDir, fmt.Sprintf("nocrash-%d-", seed))
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if cfg.keep && len(mount)+len(bucket) > 0 {
			fmt.Fprintf(cfg.out, "  kept: %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	addr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	p := &fsProc{bin: cfg.bin, stateDir: filepath.Join(dir, "state"), mnt: filepath.Join(dir, "mnt"),
		logPath: filepath.Join(dir, "bucketfs.log"), storeArgs: []string{"--s3-listen", addr}}
	if err := os.Mkdir(p.mnt, 0o755); err != nil {
		return nil, nil, err
	}
	defer p.stop()
	if err := p.start(ctx); err != nil {
		return nil, nil, err
	}
	if err := os.Mkdir(filepath.Join(p.mnt, subdir), 0o755); err != nil {
		return nil, nil, err
	}
	m := newModel()
	var crashing, stop atomic.Bool
	w := &writer{m: m, mnt: p.mnt, rng: rand.New(rand.NewPCG(seed, 1)), crashing: &crashing, stop: &stop, big: cfg.big}
	done := make(chan error, 1)
	go func() { done <- w.run() }()
	sleep(ctx, d)
	stop.Store(true)
	<-done // a call that failed is in m.writerErrors
	m.freeze()
	obs, err := observe(p.mnt)
	if err != nil {
		return nil, nil, err
	}
	var vs []violation
	for _, s := range m.writerErrors {
		vs = append(vs, violation{rule: ruleWriter, file: firstOr(s.files, -1), expected: "the call succeeds", read: s.String()})
	}
	for _, f := range m.files {
		last := f.cur()
		if last.inflight { // the failed call: either way
			continue
		}
		rf, shown := obs.files[last.name]
		if last.name == "" || shown && rf.err == nil && last.c.equal(rf.data) {
			continue
		}
		vs = append(vs, violation{rule: "no crash: every file shows its last state", file: f.id, name: last.name,
			expected: f.describeState(len(f.states) - 1), read: describeShown(rf, shown)})
	}
	for name, rf := range obs.files {
		if m.holder(name) < 0 {
			vs = append(vs, violation{rule: "no crash: every file shows its last state", file: -1, name: name,
				expected: "absent", read: rf.describe()})
		}
	}
	if err := p.flush(ctx); err != nil {
		return vs, nil, err
	}
	env, err := readEnv(filepath.Join(p.stateDir, "s3.env"))
	if err != nil {
		return vs, nil, err
	}
	c := s3Client(env)
	bucket, err = checkBucketVersions(ctx, c, env["BUCKETFS_BUCKET"], m)
	if err != nil {
		return vs, bucket, err
	}
	conv, err := checkConverged(ctx, c, env["BUCKETFS_BUCKET"], m, obs)
	return vs, append(bucket, conv...), err
}

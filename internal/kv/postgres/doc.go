// Package postgres is the [kv.Store] on PostgreSQL, for several bucketfs
// servers sharing one file system: every server opens the same database
// (and schema), and the database decides the order of their transactions.
//
// # Tables
//
// One table per schema holds the whole store: kv (k bytea PRIMARY KEY,
// v bytea NOT NULL). bytea compares bytewise (memcmp, then the shorter
// first), which is exactly the kv order, whatever the database's collation;
// a Scan is an index range scan in key order. A second table,
// schema_version, holds one row: the version of the schema's tables. The
// first Open on a database without the schema creates both in one
// transaction of plain DDL (CREATE ... IF NOT EXISTS, no advisory locks,
// no triggers), so no server sees a schema without its version; two
// servers doing it at once collide in the catalog and the loser tries
// again. An Open that finds another version refuses, in one line:
// "database schema bucketfs is version N; this bucketfs needs M". There is
// no row that every transaction writes: transactions on different keys do
// not conflict.
//
// # Update: SERIALIZABLE, buffered, retried
//
// An Update is a SERIALIZABLE read-write transaction. Its writes are kept
// in memory (a map of sets and deletes, a list of deleted ranges) and sent
// with COMMIT in one batch, one round trip, with BEGIN in front when fn
// read nothing; a read that begins the transaction carries its BEGIN the
// same way. So an Update that reads two keys and writes four costs three
// round trips, and two when it prefetches the two (see Prefetch below).
// Reads inside the Update merge the buffer over the database
// rows (read-your-writes; a DeleteRange is a range tombstone until the
// commit); a Scan reads the rows in pages (LIMIT, from 64 rows up to
// Options.ScanPage) and stops reading when fn returns false.
//
// PostgreSQL tracks what a SERIALIZABLE transaction read by index page,
// not by key: a Get or a Scan locks the leaf page of kv's primary key
// index it visited (and the heap row it found). A write to that page by
// another transaction is a conflict with the reader, whatever key it
// writes. So two transactions that each read a key and write another on
// one page, all four keys different, abort one of the two (on PostgreSQL
// 15, 10 of 10 such pairs, and none of 10 when each wrote beside the key
// it read itself, on another page). Keys that many transactions read
// and write at once belong on pages of their own, or are not read at
// all: package meta writes its counters as blind deltas for this reason.
//
// PostgreSQL's serializable snapshot isolation rolls back one of two
// transactions whose reads and writes could not have happened in some
// serial order (serialization_failure, 40001), as it does one of two that
// deadlock (40P01). Update then runs fn again from the start, after a
// jittered, growing pause, until ctx ends; it does the same when the
// connection was lost before COMMIT was sent (the server restarting), as
// nothing of the transaction can have committed. fn may therefore run more
// than once (the kv contract says so). When the connection is lost while
// COMMIT is under way, nobody can tell whether it committed: Update returns
// an error wrapping [kv.ErrUnknownOutcome] and does not run fn again, since
// repeating a write that landed could be wrong.
//
// # View: a snapshot is enough for readers
//
// A View is a REPEATABLE READ READ ONLY transaction: one snapshot, taken at
// its first read, holding every transaction committed before it and none
// after, so a View never sees half an Update and never waits for writers.
// It is not SERIALIZABLE, and so it allows one anomaly, the read-only
// anomaly of snapshot isolation: a View may see an Update T2 and not an
// Update T1 that committed after T2 although T1 must be ordered before T2
// (T1 read a key T2 then overwrote). What the View sees is still a state
// that a serial run of the Updates it sees produces (their dependencies
// among themselves have no cycle, and they read only from each other), so
// every invariant an Update keeps holds in it. What it may miss is only
// the order a later View would imply; a View never writes, and every
// decision taken from it that changes the store is taken again inside an
// Update, which is serializable. SERIALIZABLE READ ONLY would remove the
// anomaly at the cost of tracking the View's reads (or waiting for a safe
// snapshot, with DEFERRABLE) and of a View failing with 40001.
//
// Its COMMIT is sent after View returns, by a goroutine that then gives
// the connection back to the pool (Stats counts it as Unwaited, not as a
// round trip): a READ ONLY REPEATABLE READ transaction's COMMIT checks
// nothing, and every row fn was given had arrived, so no caller needs
// its answer. A View of one key is one round trip.
//
// # Prefetch, and reads remembered
//
// Prefetch reads several keys in one statement (k = ANY of an array),
// and a View's or an Update's reader keeps every value it read, from a
// Prefetch or a Get, for the rest of the transaction: its snapshot does
// not change, so a second Get of a key costs nothing. Package meta
// prefetches the keys an operation will read when it knows them up
// front: a lookup reads the directory and the name in one round trip, a
// create its parent, name and counter cell in one.
//
// # Guesses: an Update's reads from memory, checked with its COMMIT
//
// The values that a View or an Update of this store read, and those an
// Update wrote, are kept (up to 16,384 keys of values up to 1 KiB) as
// guesses. An Update's first run takes a value from them instead of
// reading it, and the batch that carries its writes and COMMIT checks
// every value it took, first: a statement that fails when one differs from
// the row, which rolls the transaction back; Update then runs fn again
// without guesses. So an Update that reads only keys this server read or
// wrote shortly before (a create after the kernel's lookup of the name, a
// write after the create) is one round trip. guess.go states why this is
// as serializable as reading; Stats counts Guessed reads and Stale
// Updates.
//
// # Snapshot: one connection, reads take turns
//
// A Snapshot holds one connection of the pool in a REPEATABLE READ READ
// ONLY transaction until Close; its snapshot is taken when Snapshot
// returns. Reads from several goroutines take turns on the connection (a
// Scan gives it up between pages, so a long scan does not stop a Get).
// An exported snapshot (pg_export_snapshot with SET TRANSACTION SNAPSHOT
// on other connections) would let reads run in parallel, but exists only
// on PostgreSQL itself, costs a round trip per reading transaction, and
// the exporter reads one file's blocks in order anyway. An open Snapshot
// keeps VACUUM from removing rows newer than it: close it soon.
//
// # Durability: at COMMIT, or at Sync with AsyncCommit
//
// Open sets synchronous_commit to on (unless the URL sets another level,
// such as remote_apply for synchronous replicas): COMMIT returns once the
// commit record is flushed to the write-ahead log, so every Update that
// returned nil is durable and Sync has nothing to do.
//
// With Options.AsyncCommit (or synchronous_commit=off in the URL) Updates
// commit with synchronous_commit off and return before the log is flushed,
// as Pebble's do; a crash of the database may lose the last of them, never
// a middle one. Sync then commits a write of this store's own row in table
// sync_marks at the synchronous level, which flushes the log up to that
// commit: every Update that returned before, and every commit of another
// server that this one saw, since a commit's record is in the log before
// the commit is visible. Each store has its own row, so Syncs of several
// servers do not conflict.
//
// # Errors
//
// Errors name the database as "postgres host:port/database: ..." and never
// the password; Open does not repeat a URL that fails to parse.
//
// # Distributed PostgreSQL-compatible databases
//
// The SQL is kept to what YugabyteDB and CockroachDB accept: CREATE ... IF
// NOT EXISTS, INSERT ... ON CONFLICT, unnest of two arrays, bytea keys,
// SERIALIZABLE transactions and no advisory locks, triggers, LISTEN or
// exported snapshots. What such a database would change, on paper (none
// is tested here; this is what their documentation describes and what
// this store asks of a database):
//
//   - YugabyteDB (YSQL) shards a table by its primary key, and by default
//     hashes the first column of it. Hashed, the kv table would answer a
//     Get at once but every Scan (a directory listing, the export queue,
//     a lock check) by reading every tablet. The table would have to be
//     made with PRIMARY KEY (k ASC), range sharding, which PostgreSQL's
//     own syntax does not take: the one DDL statement that would differ.
//     SERIALIZABLE is supported; conflicts come back as 40001 more often
//     (optimistic conflict checks at write time as well as commit), which
//     Update already retries. Commits are replicated by Raft and durable
//     when they return whatever synchronous_commit says, and a node's
//     crash loses no commit: AsyncCommit gains nothing there. Every round
//     trip and commit costs a network hop or a consensus round rather
//     than a local call, so the round trips per operation (Stats) weigh
//     several times more than on one PostgreSQL server.
//   - Keys that grow with time would meet on one range tablet: change
//     records (C<unix ns>...) and the export queue's order (Q<due>...)
//     are appended at the end of their ranges by every server. On one
//     PostgreSQL server that is one B-tree page; on a range-sharded
//     database it is one tablet taking all those writes. Prefixing them
//     with the writing server (or a few hash buckets) would spread them;
//     the readers then merge several ranges.
//   - CockroachDB takes the same SQL (bytea is BYTES), range-shards by
//     default and runs SERIALIZABLE by default, with the same retries. It
//     does not know the planner settings Open gives every session
//     (enable_seqscan, enable_hashjoin, enable_mergejoin off, so that a
//     plan cached while the table was small never reads all of it); they
//     would have to go, and its optimizer be trusted with primary key
//     lookups. YugabyteDB has them, as PostgreSQL's.
//   - Citus distributes a table by a distribution column across worker
//     nodes; a transaction that touches several shards has no one
//     snapshot and no serializable order across them. A file system's
//     transactions read and write keys all over its namespace, so the
//     kv table of one file system must live in one shard (a column
//     naming the file system as the distribution column, every key of
//     it in that shard): each file system is then exactly as on one
//     PostgreSQL server, and Citus spreads file systems, not one.
//   - Nothing here relies on PostgreSQL's clock or process identity,
//     except AsyncCommit's check of a restarted database
//     (pg_postmaster_start_time), which bucketfs servers do not use.
package postgres

// Package sync moves changes between the file system and the bucket.
//
// The importer (bucket to file system) lists a directory's prefix the first
// time the directory is used, turning objects into files and common
// prefixes into directories. Keys that cannot be paths are skipped, counted
// and logged once each; they never stop the rest of the listing. Every
// import opens a meta.Observation of the directory it adds to before the
// bucket requests it rests on (a listing or poll, one per page) and hands
// it to meta with the result: a listing older than a file-side removal (rm
// -r while a poll is under way), through this server or another sharing
// the store, never brings the name back.
//
// The exporter (file system to bucket) drains the export queue kept in
// meta. It reconciles one inode at a time: the objects that should exist
// (one per current name of the inode, outside lost+found) against the
// objects that do (the inode's Keys). A changed file is uploaded once (one
// PUT, or a multipart upload whose unchanged ranges are copied server side
// from the version the file was based on) and copied to its other names; a
// name that went away is deleted; a renamed file is copied and then deleted;
// a renamed directory first makes sure its whole subtree is imported, then
// queues its children. Every upload is a complete object version: multipart
// uploads are aborted on failure and never leave a partial object. Those a
// crash cuts short are journaled in meta and aborted at the next start
// (uploads.go).
//
// Writes go on during an upload: the inode records a generation number, and
// an upload only marks the inode clean if no write happened meanwhile;
// otherwise the inode stays queued and is exported again after the quiet
// period.
//
// Where several servers share one file system, only the holder of the
// sync lease runs the exporter and the importer's poller and event
// workers (package engine), under its fence: every record they make
// fails once another server took the lease (meta's lease.go), and an
// export never replaces nor deletes an object of its inode with a later
// generation (errNewerExported). Imports a front end asks for (the first
// listing of a directory, the revalidation of a file at open) run on
// every server.
//
// A flush (Flush, FlushInode) ignores the quiet period, but not the pieces
// of one write: it does not export a file between two of them, waiting a
// bounded time for the rest (flushRun).
//
// Attributes travel as object user metadata under the names s3fs uses
// (mode, uid, gid, mtime in seconds), plus bucketfs-mtime with nanoseconds
// and rdev for device nodes. Symlinks are objects whose body is the target;
// fifos, sockets and devices are empty objects whose mode records their
// type. Extended attributes stay on the file side.
package sync

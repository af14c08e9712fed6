// Package s3local runs the embedded default S3 store: a real S3 endpoint on a
// loopback port, served in process by versitygw's posix backend over a local
// directory, with bucket versioning on. It lets `bucketfs serve` work with no
// bucket configured, and lets users point the aws CLI (or any S3 client) at
// the same data through the environment file the server writes.
//
// # Layout of the state directory
//
//	Dir/credentials.json  the root access key and secret (mode 0600), made
//	                      with crypto/rand the first time and reused after
//	Dir/data/             one directory per bucket, one file per object
//	Dir/versions/         older object versions (must be outside data/)
//
// Object metadata (ETags, version ids, user metadata) lives in extended
// attributes, so Dir must be on a file system with user xattrs (ext4, xfs,
// btrfs, tmpfs on recent kernels).
//
// # One store per process
//
// versitygw's posix backend calls os.Chdir to its data directory and then
// resolves object paths relative to the process working directory. Two stores
// in one process would therefore read and write each other's files, so Start
// refuses a second instance while one is running, and every user of this
// package (and every test in a binary that starts a store) must use absolute
// paths. Close puts the working directory back to what it was before Start.
//
// # Events
//
// Every successful object operation (put, copy, multipart completion, delete,
// tagging, ACL) is reported to Config.OnEvent, synchronously from the request
// handler and before the response is sent: when a client sees the response
// the callback has already returned. Callbacks for concurrent requests run
// concurrently, so OnEvent must be safe for concurrent use and must not block.
//
// # What it must never do
//
// Use fixed default credentials, listen anywhere but where the caller asked,
// or leave the process working directory inside its data directory after
// Close.
package s3local

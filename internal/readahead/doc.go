// Package readahead streams reads of one large object version from the
// bucket with several ranged GETs in flight.
//
// # What it owns
//
// A file handle that reads a large object (1 MiB or more) owns one [Reader].
// The Reader owns the chunk buffers of that handle and the goroutines that
// fill them; it knows nothing about S3. Bytes come from a [Source], which
// reads one pinned object version (version id and ETag fixed at open), so a
// Reader never mixes two versions of an object.
//
// # Model
//
// A chunk is one Source.ReadAt (one ranged GET) of up to Options.ChunkSize
// bytes into a buffer the Reader owns. Chunks are kept in a list sorted by
// offset, never overlapping. A read takes a reference on the chunks covering
// its range, waits only for those, copies out, and drops the references.
//
// Each read is classified against what came before:
//
//   - a stream read lies close to the stream position (the highest end of the
//     stream's reads), within a slack of max(ChunkSize, 16 MiB) either side,
//     or inside the read-ahead window. The slack absorbs the reordering of the
//     kernel's concurrent reads of one handle. The Reader then keeps fetching
//     ahead: the first chunk of a stream is Options.InitialChunk long, for a
//     quick first byte, and each next chunk doubles up to ChunkSize; the
//     distance fetched ahead grows with the bytes read, up to Window chunks.
//     A chunk is released once reads have taken all of its bytes, however
//     late the last of them arrives.
//   - a read that starts within 128 KiB after the previous read starts a new
//     stream there. This is also how the first read at offset 0 starts one.
//   - anything else is a random read. It is served by one small fetch of just
//     the range it needs, rounded up to 128 KiB, and starts no read-ahead. One
//     random read leaves a running stream alone (it may be a straggler); a
//     second one in a row drops the stream and its buffers.
//
// # Invariants
//
//   - Each byte once: a sequential read of the object, whatever the order
//     its reads arrive in within the kernel's read-ahead, fetches each byte
//     at most once. The Reader remembers the bytes reads have taken: a
//     chunk stays until they cover it, no fetch asks for taken bytes, and
//     making room evicts only chunks no read is waited for any more, never
//     read-ahead the stream has yet to reach (see Reader.take). Reading
//     bytes again, a failed fetch, or memory full of chunks late reads
//     still need may fetch bytes again.
//   - Memory: buffers held by one Reader (in chunks, in flight, or kept for
//     reuse) never exceed Window*ChunkSize bytes plus the slack. Full-size
//     buffers are reused through a per-Reader free list. A read whose range
//     cannot be buffered within that bound is read straight into the
//     caller's slice.
//   - No fetch ever asks for bytes at or past the object size.
//   - Errors are never swallowed: a failed chunk stays in the list until a read
//     needing it receives the error, then it is forgotten, so retrying that
//     read fetches it again.
//   - Close cancels every fetch and waits for its goroutine: a closed Reader
//     leaves no goroutine behind. Reads waiting at that moment, and reads
//     after it, return [ErrClosed].
//
// Fetches run under the Reader's own context, not the caller's: a chunk is
// shared by the reads that need it, and read-ahead outlives the read that
// started it. A caller's context only bounds how long that caller waits.
//
// # Locking
//
// One mutex per Reader guards the chunk list, the buffer accounting and the
// stream state. It is never held while waiting for a fetch or calling the
// Source.
package readahead

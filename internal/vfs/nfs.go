package vfs

// Readable reports whether the handle was opened for reading (the NFS
// front end lets a write open read what the caller may read).
func (h *Handle) Readable() bool { return h.readable }

// Writable reports whether the handle was opened for writing.
func (h *Handle) Writable() bool { return h.writable }

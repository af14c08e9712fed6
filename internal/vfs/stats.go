package vfs

import "sync/atomic"

// Stats are the data and metadata counters of an FS, named after the
// S3 Files metrics: bytes read from the tier and directly from the bucket,
// bytes written, metadata operations.
type Stats struct {
	ReadTierBytes   int64 `json:"read_tier_bytes"`
	ReadDirectBytes int64 `json:"read_direct_bytes"`
	WriteBytes      int64 `json:"write_bytes"`
	MetadataOps     int64 `json:"metadata_operations"`
}

type counters struct {
	readTier, readDirect, written, metaOps atomic.Int64
}

// Stats returns the counters.
func (fs *FS) Stats() Stats {
	c := &fs.counters
	return Stats{ReadTierBytes: c.readTier.Load(), ReadDirectBytes: c.readDirect.Load(),
		WriteBytes: c.written.Load(), MetadataOps: c.metaOps.Load()}
}

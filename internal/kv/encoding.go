package kv

import "encoding/binary"

// AppendUint64 appends v to b in big-endian order, so that encoded integers
// sort like the integers themselves.
func AppendUint64(b []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(b, v)
}

// Uint64 decodes a big-endian uint64 from the first 8 bytes of b. It panics if
// b is shorter than 8 bytes.
func Uint64(b []byte) uint64 {
	return binary.BigEndian.Uint64(b)
}

// PrefixEnd returns the smallest key greater than every key that starts with
// prefix: the exclusive upper bound for a Scan of the prefix. It returns nil
// (no upper bound) when no such key exists, that is when prefix is empty or
// all 0xff bytes. The result never aliases prefix.
func PrefixEnd(prefix []byte) []byte {
	for i := len(prefix) - 1; i >= 0; i-- {
		if prefix[i] != 0xff {
			end := make([]byte, i+1)
			copy(end, prefix)
			end[i]++
			return end
		}
	}
	return nil
}

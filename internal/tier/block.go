package tier

import (
	"encoding/binary"
	"errors"
	"fmt"

	"bucketfs/internal/kv"
)

// BlockSize is the size of one block of file data. Small blocks keep a
// random 4 KiB write a 4 KiB write (not a read-modify-write of a large
// block); a sequential write stores one key per block, which the store
// takes in its stride.
const BlockSize = 4096

// prefixBlock starts every block key: b<ino as 8 bytes><index as 8 bytes>.
// Package meta reserves this prefix in its key layout.
const prefixBlock = 'b'

// Block encodings; the first byte of a value says which.
const (
	// kindFull: the block's first len(v)-1 bytes are present and follow.
	kindFull byte = iota
	// kindZero: the block's first L bytes (uint16 after the kind) are
	// present and zero.
	kindZero
	// kindRanges: a count (uint16), then count (offset, length) pairs
	// (uint16 each) of present ranges, sorted and coalesced, then the
	// block's bytes up to the end of the last range (bytes outside the
	// ranges are meaningless).
	kindRanges
)

// stamped is set on the kind byte of a block that holds changes made on
// the file side: the value then ends with the block's stamp (8 bytes,
// little-endian), the inode's generation of the last such change (see
// Stamp). A block without it (bytes fetched from the base object, or a
// block stored before stamps existed) has stamp 0.
const stamped byte = 0x80

// stampLen is the length of the stamp that ends a stamped value.
const stampLen = 8

var errCorruptBlock = errors.New("tier: corrupt block")

func blockPrefix(ino uint64) []byte {
	return kv.AppendUint64([]byte{prefixBlock}, ino)
}

func blockKey(ino uint64, idx int64) []byte {
	return kv.AppendUint64(blockPrefix(ino), uint64(idx))
}

// blockIndex returns the index from a block key.
func blockIndex(k []byte) int64 { return int64(kv.Uint64(k[9:])) }

// block is one decoded block: its present ranges (relative to the block's
// start) and its bytes.
type block struct {
	ext  extents
	data [BlockSize]byte
	// zeros: ext is one range from 0 whose bytes are all zero (kindZero).
	// Set by settle once the block is changed, before it is encoded.
	zeros bool
	// stamp is the generation of the last file-side change of the block;
	// 0 for a block that only holds bytes of the base object.
	stamp uint64
}

// split returns the encoded block v without its stamp, its kind (without
// the stamped bit) and its stamp. The body still starts with the kind
// byte, so offsets into it are those of an unstamped value.
func split(v []byte) (body []byte, kind byte, stamp uint64, err error) {
	if len(v) == 0 {
		return nil, 0, 0, errCorruptBlock
	}
	if v[0]&stamped == 0 {
		return v, v[0], 0, nil
	}
	if len(v) < 1+stampLen {
		return nil, 0, 0, errCorruptBlock
	}
	n := len(v) - stampLen
	return v[:n], v[0] &^ stamped, binary.LittleEndian.Uint64(v[n:]), nil
}

// stampOf returns the stamp of the encoded block v.
func stampOf(v []byte) (uint64, error) {
	_, _, stamp, err := split(v)
	return stamp, err
}

// settle works out, once, what encodedLen, encode and cost need to know
// of a changed block.
func (b *block) settle() {
	b.zeros = len(b.ext) == 1 && b.ext[0].Off == 0 && allZero(b.data[:b.ext[0].Len])
}

// reset makes b a block with nothing present.
func (b *block) reset() {
	b.ext = b.ext[:0]
	b.stamp = 0
}

// decode loads v into b.
func (b *block) decode(v []byte) error {
	b.reset()
	v, kind, stamp, err := split(v)
	if err != nil {
		return err
	}
	b.stamp = stamp
	switch kind {
	case kindFull:
		n := len(v) - 1
		if n == 0 || n > BlockSize {
			return errCorruptBlock
		}
		copy(b.data[:], v[1:])
		b.ext = append(b.ext, Range{0, int64(n)})
	case kindZero:
		if len(v) != 3 {
			return errCorruptBlock
		}
		n := int(binary.LittleEndian.Uint16(v[1:]))
		if n == 0 || n > BlockSize {
			return errCorruptBlock
		}
		clear(b.data[:n])
		b.ext = append(b.ext, Range{0, int64(n)})
	case kindRanges:
		if len(v) < 3 {
			return errCorruptBlock
		}
		count := int(binary.LittleEndian.Uint16(v[1:]))
		head := 3 + 4*count
		if count == 0 || len(v) < head {
			return errCorruptBlock
		}
		for i := 0; i < count; i++ {
			off := int64(binary.LittleEndian.Uint16(v[3+4*i:]))
			n := int64(binary.LittleEndian.Uint16(v[5+4*i:]))
			b.ext = append(b.ext, Range{off, n})
		}
		if !b.ext.valid() || b.ext.last() > BlockSize || int64(len(v)-head) != b.ext.last() {
			return errCorruptBlock
		}
		copy(b.data[:], v[head:])
	default:
		return errCorruptBlock
	}
	return nil
}

// encodedLen returns the length of b's encoding; 0 when nothing is present
// (the block is to be deleted).
func (b *block) encodedLen() int {
	n := 0
	switch {
	case len(b.ext) == 0:
		return 0
	case b.zeros:
		n = 3
	case len(b.ext) == 1 && b.ext[0].Off == 0:
		n = 1 + int(b.ext[0].Len)
	default:
		n = 3 + 4*len(b.ext) + int(b.ext.last())
	}
	if b.stamp != 0 {
		n += stampLen
	}
	return n
}

// encode appends b's encoding to dst; nil when nothing is present (the
// block is to be deleted).
func (b *block) encode(dst []byte) []byte {
	if len(b.ext) == 0 {
		return nil
	}
	var flag byte
	if b.stamp != 0 {
		flag = stamped
	}
	if len(b.ext) == 1 && b.ext[0].Off == 0 {
		n := b.ext[0].Len
		if b.zeros {
			dst = binary.LittleEndian.AppendUint16(append(dst, kindZero|flag), uint16(n))
		} else {
			dst = append(append(dst, kindFull|flag), b.data[:n]...)
		}
	} else {
		dst = append(dst, kindRanges|flag)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(b.ext)))
		for _, r := range b.ext {
			dst = binary.LittleEndian.AppendUint16(dst, uint16(r.Off))
			dst = binary.LittleEndian.AppendUint16(dst, uint16(r.Len))
		}
		dst = append(dst, b.data[:b.ext.last()]...)
	}
	if b.stamp != 0 {
		dst = binary.LittleEndian.AppendUint64(dst, b.stamp)
	}
	return dst
}

// cost returns the bytes of file data the encoded block v stores: what it
// counts for in the tier's usage. A block of zeros stores none, however
// much of the file it covers.
func cost(v []byte) (int64, error) {
	v, kind, _, err := split(v)
	if err != nil {
		return 0, err
	}
	switch kind {
	case kindFull:
		return int64(len(v) - 1), nil
	case kindZero:
		return 0, nil
	case kindRanges:
		if len(v) < 3 {
			return 0, errCorruptBlock
		}
		head := 3 + 4*int(binary.LittleEndian.Uint16(v[1:]))
		if len(v) < head {
			return 0, errCorruptBlock
		}
		return int64(len(v) - head), nil
	}
	return 0, errCorruptBlock
}

// cost is what b stores once encoded (see the function cost).
func (b *block) cost() int64 {
	switch {
	case len(b.ext) == 0, b.zeros:
		return 0
	case len(b.ext) == 1 && b.ext[0].Off == 0:
		return b.ext[0].Len
	}
	return b.ext.last()
}

// zeroLen returns L of a kindZero value.
func zeroLen(v []byte) (int64, error) {
	if len(v) != 3 {
		return 0, errCorruptBlock
	}
	return int64(binary.LittleEndian.Uint16(v[1:])), nil
}

// eachRange calls fn for every present range of the encoded block v, in
// order, with its offset in the block and its bytes (nil for zeros).
func eachRange(v []byte, fn func(off int64, data []byte, n int64)) error {
	v, kind, _, err := split(v)
	if err != nil {
		return err
	}
	switch kind {
	case kindFull:
		fn(0, v[1:], int64(len(v)-1))
	case kindZero:
		n, err := zeroLen(v)
		if err != nil {
			return err
		}
		fn(0, nil, n)
	case kindRanges:
		count := int(binary.LittleEndian.Uint16(v[1:]))
		head := 3 + 4*count
		if len(v) < head {
			return errCorruptBlock
		}
		body := v[head:]
		for i := 0; i < count; i++ {
			off := int64(binary.LittleEndian.Uint16(v[3+4*i:]))
			n := int64(binary.LittleEndian.Uint16(v[5+4*i:]))
			if off+n > int64(len(body)) {
				return errCorruptBlock
			}
			fn(off, body[off:off+n], n)
		}
	default:
		return errCorruptBlock
	}
	return nil
}

func allZero(p []byte) bool {
	for len(p) >= 8 {
		if binary.LittleEndian.Uint64(p) != 0 {
			return false
		}
		p = p[8:]
	}
	for _, c := range p {
		if c != 0 {
			return false
		}
	}
	return true
}

func blockErr(op string, ino uint64, idx int64, err error) error {
	return fmt.Errorf("tier: %s inode %d block %d: %w", op, ino, idx, err)
}

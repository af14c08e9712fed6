package nfs4

import (
	"encoding/binary"
	"errors"
	"math"
)

// xdrBuf appends XDR encodings. Attribute values (fattr4.attr_vals) and
// replies are built with it.
type xdrBuf []byte

func (b *xdrBuf) u32(v uint32) { *b = binary.BigEndian.AppendUint32(*b, v) }
func (b *xdrBuf) u64(v uint64) { *b = binary.BigEndian.AppendUint64(*b, v) }
func (b *xdrBuf) bool(v bool) {
	if v {
		b.u32(1)
	} else {
		b.u32(0)
	}
}

func (b *xdrBuf) opaque(p []byte) {
	b.u32(uint32(len(p)))
	*b = append(*b, p...)
	for len(*b)%4 != 0 {
		*b = append(*b, 0)
	}
}

func (b *xdrBuf) str(s string) { b.opaque([]byte(s)) }

func (b *xdrBuf) bitmap(words []uint32) {
	b.u32(uint32(len(words)))
	for _, w := range words {
		b.u32(w)
	}
}

// xdrReader decodes attribute values. Every read checks the remaining
// length first, so a short or hostile buffer yields errBadXDR, never a
// panic or an allocation larger than the input.
type xdrReader struct {
	b   []byte
	err error
}

var errBadXDR = errors.New("nfs4: malformed XDR")

func (r *xdrReader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		r.err = errBadXDR
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *xdrReader) u32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (r *xdrReader) u64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func (r *xdrReader) opaque(max int) []byte {
	n := r.u32()
	if r.err != nil {
		return nil
	}
	if n > uint32(max) || n > math.MaxInt32 {
		r.err = errBadXDR
		return nil
	}
	p := r.take(int(n))
	if pad := (4 - int(n)%4) % 4; pad > 0 {
		r.take(pad)
	}
	return p
}

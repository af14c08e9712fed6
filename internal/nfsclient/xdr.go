package nfsclient

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
	"github.com/buildbarn/go-xdr/pkg/runtime"
)

// xdrDecoder reads XDR items from an in-memory buffer, remembering the
// first error so that a sequence of reads can be checked once at the end.
// Nothing it allocates is larger than the buffer itself.
type xdrDecoder struct {
	r   *bytes.Reader
	err error
}

func newXDRDecoder(b []byte) *xdrDecoder { return &xdrDecoder{r: bytes.NewReader(b)} }

func (d *xdrDecoder) fail(err error) {
	if d.err == nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		d.err = err
	}
}

func (d *xdrDecoder) u32() uint32 {
	if d.err != nil {
		return 0
	}
	v, _, err := runtime.ReadUnsignedInt(d.r)
	d.fail(err)
	return v
}

func (d *xdrDecoder) u64() uint64 {
	if d.err != nil {
		return 0
	}
	v, _, err := runtime.ReadUnsignedHyper(d.r)
	d.fail(err)
	return v
}

func (d *xdrDecoder) boolean() bool {
	if d.err != nil {
		return false
	}
	v, _, err := runtime.ReadBool(d.r)
	d.fail(err)
	return v
}

// opaque reads a variable-length opaque; a length beyond what is left in
// the buffer is an error, not an allocation.
func (d *xdrDecoder) opaque() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if int64(n) > int64(d.r.Len()) {
		d.fail(fmt.Errorf("opaque of %d bytes with only %d left", n, d.r.Len()))
		return nil
	}
	b := make([]byte, n)
	io.ReadFull(d.r, b)
	if pad := (4 - n%4) % 4; pad != 0 {
		var p [3]byte
		if _, err := io.ReadFull(d.r, p[:pad]); err != nil {
			d.fail(err)
		} else if p != [3]byte{} {
			d.fail(fmt.Errorf("non-zero XDR padding"))
		}
	}
	return b
}

func (d *xdrDecoder) utf8() string {
	b := d.opaque()
	if d.err == nil && !utf8.Valid(b) {
		d.fail(fmt.Errorf("string %q is not valid UTF-8", b))
	}
	return string(b)
}

func (d *xdrDecoder) ascii() string {
	b := d.opaque()
	for _, c := range b {
		if c > 0x7f {
			d.fail(fmt.Errorf("string %q is not ASCII", b))
			break
		}
	}
	return string(b)
}

// bitmap reads a bitmap4 (uint32<>), bounded by the buffer size.
func (d *xdrDecoder) bitmap() []uint32 {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if int64(n)*4 > int64(d.r.Len()) {
		d.fail(fmt.Errorf("bitmap of %d words with only %d bytes left", n, d.r.Len()))
		return nil
	}
	bm := make([]uint32, n)
	for i := range bm {
		bm[i] = d.u32()
	}
	return bm
}

// nfstime reads an nfstime4 (int64 seconds, uint32 nanoseconds < 1e9).
func (d *xdrDecoder) nfstime() time.Time {
	sec := int64(d.u64())
	nsec := d.u32()
	if d.err == nil && nsec >= 1e9 {
		d.fail(fmt.Errorf("nfstime4 nseconds %d out of range", nsec))
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (d *xdrDecoder) duration() time.Duration {
	t := d.nfstime()
	return time.Duration(t.Unix())*time.Second + time.Duration(t.Nanosecond())
}

// value decodes a generated go-xdr type.
func (d *xdrDecoder) value(v io.ReaderFrom) {
	if d.err != nil {
		return
	}
	_, err := v.ReadFrom(d.r)
	d.fail(err)
}

// xdrEncoder appends XDR items to a byte slice.
type xdrEncoder struct{ b []byte }

func (e *xdrEncoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *xdrEncoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }

func (e *xdrEncoder) boolean(v bool) {
	if v {
		e.u32(1)
	} else {
		e.u32(0)
	}
}

func (e *xdrEncoder) opaque(b []byte) {
	e.u32(uint32(len(b)))
	e.b = append(e.b, b...)
	e.b = append(e.b, make([]byte, (4-len(b)%4)%4)...)
}

func (e *xdrEncoder) str(s string) { e.opaque([]byte(s)) }

func (e *xdrEncoder) bitmap(bm []uint32) {
	e.u32(uint32(len(bm)))
	for _, w := range bm {
		e.u32(w)
	}
}

func (e *xdrEncoder) nfstime(t time.Time) {
	e.u64(uint64(t.Unix()))
	e.u32(uint32(t.Nanosecond()))
}

func (e *xdrEncoder) duration(d time.Duration) {
	e.nfstime(time.Unix(0, int64(d)))
}

func (e *xdrEncoder) value(v io.WriterTo) {
	var buf bytes.Buffer
	v.WriteTo(&buf) // writing to a bytes.Buffer cannot fail
	e.b = append(e.b, buf.Bytes()...)
}

// CurrentStateid returns the special stateid (seqid 1, other all zero)
// that stands for "the current stateid" in NFSv4.1 compounds (RFC 8881
// §8.2.3). The all-zero stateid, nfsv4.Stateid4{}, is the anonymous one.
func CurrentStateid() nfsv4.Stateid4 { return nfsv4.Stateid4{Seqid: 1} }

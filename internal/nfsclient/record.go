package nfsclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Record marking (RFC 5531 §11): on a stream transport every RPC message
// is sent as a record made of one or more fragments. Each fragment starts
// with a four-byte big-endian header whose top bit says "last fragment of
// this record" and whose low 31 bits give the fragment's length.

const (
	lastFragmentBit = 1 << 31
	fragmentLenMask = lastFragmentBit - 1
	// DefaultMaxRecordSize bounds the size of a reply record the client
	// accepts; a larger record closes the connection.
	DefaultMaxRecordSize = 64 << 20
)

// errRecordTooLarge is returned by readRecord when a record's fragments add
// up to more than the allowed size.
var errRecordTooLarge = errors.New("nfsclient: RPC record exceeds the maximum record size")

// appendRecord appends msg to dst as one record. A maxFragment of zero or
// less sends the whole message as a single fragment; otherwise the message
// is split into fragments of at most maxFragment bytes. An empty message is
// sent as one empty last fragment.
func appendRecord(dst, msg []byte, maxFragment int) []byte {
	if maxFragment <= 0 || maxFragment > fragmentLenMask {
		maxFragment = fragmentLenMask
	}
	for {
		n := min(len(msg), maxFragment)
		header := uint32(n)
		if n == len(msg) {
			header |= lastFragmentBit
		}
		dst = binary.BigEndian.AppendUint32(dst, header)
		dst = append(dst, msg[:n]...)
		msg = msg[n:]
		if header&lastFragmentBit != 0 {
			return dst
		}
	}
}

// readRecord reads one complete record from r, joining its fragments. It
// never allocates more than maxSize bytes for the record, whatever the
// fragment headers claim: it grows the buffer as data actually arrives.
func readRecord(r io.Reader, maxSize int) ([]byte, error) {
	var record []byte
	var header [4]byte
	for fragments := 0; ; fragments++ {
		if _, err := io.ReadFull(r, header[:]); err != nil {
			if err == io.EOF && fragments > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		h := binary.BigEndian.Uint32(header[:])
		n := int(h & fragmentLenMask)
		if len(record)+n > maxSize {
			return nil, fmt.Errorf("%w (%d bytes so far, fragment of %d, limit %d)",
				errRecordTooLarge, len(record), n, maxSize)
		}
		// Read in bounded chunks so that a lying header costs at most
		// one chunk of memory before the stream runs dry. A chunk holds
		// a 1 MiB READ's reply whole, headers and all, so that it is
		// read into one allocation, not grown and copied.
		for n > 0 {
			chunk := min(n, 1<<20+64<<10)
			start := len(record)
			record = slices.Grow(record, chunk)[:start+chunk]
			if _, err := io.ReadFull(r, record[start:]); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, err
			}
			n -= chunk
		}
		if h&lastFragmentBit != 0 {
			return record, nil
		}
	}
}

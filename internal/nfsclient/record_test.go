package nfsclient

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestRecordsSurviveAnyFragmentSize(t *testing.T) {
	for _, size := range []int{0, 1, 3, 4, 5, 1000, 70000} {
		for _, frag := range []int{0, 1, 3, 4, 7, 1000, 1 << 20} {
			t.Run(fmt.Sprintf("msg%d/frag%d", size, frag), func(t *testing.T) {
				msg := make([]byte, size)
				for i := range msg {
					msg[i] = byte(i * 7)
				}
				// Two records back to back: the reader must stop at the
				// end of the first.
				stream := appendRecord(nil, msg, frag)
				stream = appendRecord(stream, []byte("next"), frag)
				r := bytes.NewReader(stream)
				got, err := readRecord(r, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, msg) {
					t.Fatalf("record of %d bytes came back as %d bytes", len(msg), len(got))
				}
				if got, err := readRecord(r, 1<<20); err != nil || string(got) != "next" {
					t.Fatalf("second record = %q, %v", got, err)
				}
			})
		}
	}
}

func TestAppendRecordMarksOnlyTheLastFragment(t *testing.T) {
	got := appendRecord(nil, []byte("abcde"), 2)
	want := []byte{
		0, 0, 0, 2, 'a', 'b',
		0, 0, 0, 2, 'c', 'd',
		0x80, 0, 0, 1, 'e',
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x", got, want)
	}
}

func TestReadRecordRefusesRecordsOverTheLimitWithoutAllocatingThem(t *testing.T) {
	// A header claiming 2 GiB with nothing behind it.
	huge := binary.BigEndian.AppendUint32(nil, 0x80000000|0x7fffffff)
	if _, err := readRecord(bytes.NewReader(huge), 1<<20); !errors.Is(err, errRecordTooLarge) {
		t.Fatalf("huge fragment: err = %v, want errRecordTooLarge", err)
	}
	// Fragments that are each small but add up past the limit.
	var stream []byte
	for range 5 {
		stream = binary.BigEndian.AppendUint32(stream, 100)
		stream = append(stream, make([]byte, 100)...)
	}
	if _, err := readRecord(bytes.NewReader(stream), 250); !errors.Is(err, errRecordTooLarge) {
		t.Fatalf("many fragments: err = %v, want errRecordTooLarge", err)
	}
}

func TestReadRecordReportsTruncation(t *testing.T) {
	tests := map[string]struct {
		stream []byte
		want   error
	}{
		"empty stream":             {nil, io.EOF},
		"short header":             {[]byte{0x80, 0}, io.ErrUnexpectedEOF},
		"short fragment":           {[]byte{0x80, 0, 0, 8, 1, 2, 3}, io.ErrUnexpectedEOF},
		"missing last fragment":    {[]byte{0, 0, 0, 1, 'x'}, io.ErrUnexpectedEOF},
		"lying length, small data": {append([]byte{0x80, 0, 0x10, 0}, make([]byte, 10)...), io.ErrUnexpectedEOF},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := readRecord(bytes.NewReader(tc.stream), 1<<20); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

package kv

import "testing"

func TestPrefixEnd(t *testing.T) {
	tests := []struct {
		prefix, want []byte
	}{
		{nil, nil},
		{[]byte{}, nil},
		{[]byte("a"), []byte("b")},
		{[]byte("ab"), []byte("ac")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{'a', 0xfe, 0xff, 0xff}, []byte{'a', 0xff}},
		{[]byte{0xff, 0xff}, nil},
	}
	for _, tt := range tests {
		if got := PrefixEnd(tt.prefix); string(got) != string(tt.want) || (got == nil) != (tt.want == nil) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", tt.prefix, got, tt.want)
		}
	}
	p := []byte("ab")
	PrefixEnd(p)[0] = 'X'
	if string(p) != "ab" {
		t.Errorf("PrefixEnd modified its argument: %q", p)
	}
}

func TestUint64EncodingSortsNumerically(t *testing.T) {
	vals := []uint64{0, 1, 255, 256, 1 << 32, 1<<64 - 1}
	for i, v := range vals {
		b := AppendUint64([]byte("x"), v)
		if len(b) != 9 || Uint64(b[1:]) != v {
			t.Fatalf("round trip of %d: %x", v, b)
		}
		if i > 0 && string(AppendUint64(nil, vals[i-1])) >= string(AppendUint64(nil, v)) {
			t.Errorf("encoding of %d does not sort before %d", vals[i-1], v)
		}
	}
}

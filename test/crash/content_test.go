package main

import (
	"bytes"
	"slices"
	"testing"
)

func TestContentOperationsMatchTheBytesTheyDescribe(t *testing.T) {
	w1, w2, w3 := word{3, 1}, word{3, 2}, word{3, 3}
	c := content{}.write(0, 10000, w1)
	want := c.bytes()
	c = c.write(4093, 5, w2)
	fillWord(want[4093:4098], 4093, w2)
	c = c.punch(8000, 1500)
	clear(want[8000:9500])
	c = c.truncate(12000)
	want = append(want, make([]byte, 2000)...)
	c = c.write(11999, 3, w3)
	want = append(want[:11999], 0, 0, 0)
	fillWord(want[11999:], 11999, w3)
	c = c.truncate(7)
	want = want[:7]
	if !c.equal(want) || !bytes.Equal(c.bytes(), want) {
		t.Fatalf("model %v, bytes %s", c, describeBytes(want))
	}
	if c.equal(want[:6]) || c.equal(append(slices.Clone(want), 0)) {
		t.Fatal("a cut or an extension compares equal")
	}
}

func TestRunsTellWhichWriteEachByteCameFrom(t *testing.T) {
	// Where two words of one file meet inside a block, their shared first
	// bytes belong to either; the runs must only describe the bytes.
	c := content{}.write(0, 100, word{1, 7}).write(13, 20, word{1, 8}).punch(60, 10).write(100, 30, word{2, 1})
	data := c.bytes()
	rebuilt := content{size: c.size}
	for _, r := range runsOf(data) {
		w, ok := parseRunWord(r.kind)
		switch {
		case r.kind == "zeros":
		case ok:
			rebuilt = rebuilt.write(r.from, r.to-r.from, w)
		default:
			t.Fatalf("run %v in %s", r, describeBytes(data))
		}
	}
	if !rebuilt.equal(data) || len(runsOf(data)) != len(c.runs()) {
		t.Fatalf("read back as %v, written as %v", runsOf(data), c.runs())
	}
	data[40] = 'x'
	if describeBytes(data) == c.String() {
		t.Fatal("a changed byte went unnoticed")
	}
}

func TestATornWriteMatchesOnlyAtPageBoundaries(t *testing.T) {
	pre := content{}.write(0, 3*4096, word{2, 1})
	tw := &tornWrite{pre: pre, off: 100, n: 20000, w: word{2, 2}}
	for _, tc := range []struct {
		end  int64
		want bool
	}{{4096, true}, {8192, true}, {20100, true}, {5000, false}, {101, false}} {
		data := pre.write(100, tc.end-100, word{2, 2}).bytes()
		if _, got := tw.matches(data); got != tc.want {
			t.Errorf("write cut at %d: matches = %v, want %v", tc.end, got, tc.want)
		}
	}
	if _, ok := tw.matches(pre.bytes()); ok {
		t.Error("the state before the write matched as torn (it is a state of its own)")
	}
}

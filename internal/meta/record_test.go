package meta

import (
	"encoding/binary"
	"encoding/hex"
	"flag"
	"math"
	"math/rand/v2"
	"reflect"
	"syscall"
	"testing"
	"time"
)

var inodeSeed = flag.Uint64("inode.seed", 0, "seed of the random inodes of the encoding tests (0: from the clock)")

// encodeV2 is the encoder of inode records of version 2, as bucketfs
// wrote them before version 3: stores made then hold such records, which
// decodeInode must go on reading.
func (in *Inode) encodeV2(b []byte) []byte {
	b = append(b, inodeVersionV2)
	b = binary.AppendUvarint(b, uint64(in.Ino))
	b = binary.AppendUvarint(b, uint64(in.Mode))
	b = binary.AppendUvarint(b, uint64(in.Uid))
	b = binary.AppendUvarint(b, uint64(in.Gid))
	b = binary.AppendUvarint(b, uint64(in.Nlink))
	b = binary.AppendUvarint(b, uint64(in.Rdev))
	b = binary.AppendVarint(b, in.Size)
	b = binary.AppendVarint(b, in.Atime)
	b = binary.AppendVarint(b, in.Mtime)
	b = binary.AppendVarint(b, in.Ctime)
	b = binary.AppendUvarint(b, uint64(in.Flags))
	b = appendString(b, in.Target)
	b = binary.AppendUvarint(b, in.Gen)
	b = binary.AppendUvarint(b, in.ExportedGen)
	b = in.Base.encodeV2(b)
	b = binary.AppendUvarint(b, uint64(len(in.Keys)))
	for i := range in.Keys {
		b = in.Keys[i].encodeV2(b)
	}
	b = appendString(b, in.Source)
	b = binary.AppendVarint(b, in.Backed)
	b = binary.AppendVarint(b, in.Cached)
	b = binary.AppendUvarint(b, in.Replaced)
	// The fields from here on are optional: a record an earlier
	// bucketfs wrote ends before them, and an earlier bucketfs ignores
	// them.
	b = binary.AppendVarint(b, in.Unexported)
	b = binary.AppendVarint(b, in.UnfinishedWrite)
	return b
}

func (o *Object) encodeV2(b []byte) []byte {
	b = appendString(b, o.Key)
	b = appendString(b, o.ETag)
	b = appendString(b, o.VersionID)
	return binary.AppendVarint(b, o.Size)
}

// fixtureInodes are the inodes of v2Fixtures.
var fixtureInodes = []Inode{
	{Ino: 38, Mode: syscall.S_IFREG | 0o644, Nlink: 1, Atime: 1796630400000000000, Mtime: 1796630400000000000, Ctime: 1796630400000000000,
		Flags: Defaulted, Base: Object{Key: "big/f000034", ETag: "d41d8cd98f00b204e9800998ecf8427e", VersionID: "01M98PN8FPS8MC9811AFR9PMMW"},
		Keys: []Object{{Key: "big/f000034", ETag: "d41d8cd98f00b204e9800998ecf8427e", VersionID: "01M98PN8FPS8MC9811AFR9PMMW"}}},
	{Ino: 1 << 40, Mode: syscall.S_IFREG | 0o600, Uid: 1000, Gid: 1000, Nlink: 2, Size: 12345, Atime: 1, Mtime: -2, Ctime: 3,
		Flags: DataDirty, Gen: 9, ExportedGen: 7, Backed: 100, Cached: 8192, Unexported: 4096, Replaced: 2, UnfinishedWrite: 77,
		Base: Object{Key: "a/b", ETag: "\"0123456789abcdef0123456789abcdef\"", VersionID: "v1", Size: 100},
		Keys: []Object{{Key: "a/b", ETag: "\"0123456789abcdef0123456789abcdef-3\"", VersionID: "v2", Size: 12345}, {Key: "c"}}},
	{Ino: 5, Mode: syscall.S_IFDIR | 0o755, Nlink: 3, Flags: Listed, Source: "dir/", Keys: []Object{{Key: "dir/", ETag: "\"e\""}}},
	{Ino: 6, Mode: syscall.S_IFLNK | 0o777, Nlink: 1, Size: 3, Target: "x/y", Gen: 1},
}

// v2Fixtures are fixtureInodes as the version 2 encoder wrote them (taken
// from it on 2026-12-07, before version 3).
var v2Fixtures = []string{
	"0226a4830200000100008080d88a8ef5f4ee318080d88a8ef5f4ee318080d88a8ef5f4ee31700000000b6269672f663030303033342064343164386364393866303062323034653938303039393865636638343237651a30314d3938504e38465053384d433938313141465239504d4d5700010b6269672f663030303033342064343164386364393866303062323034653938303039393865636638343237651a30314d3938504e38465053384d433938313141465239504d4d5700000000000000",
	"02808080808020808302e807e8070200f2c001020306800200090703612f622222303132333435363738396162636465663031323334353637383961626364656622027631c8010203612f62242230313233343536373839616263646566303132333435363738396162636465662d3322027632f2c001016300000000c8018080010280409a01",
	"0205ed83010000030000000000020000000000000001046469722f032265220000046469722f0000000000",
	"0206ffc30200000100060000000003782f7901000000000000000000000000",
}

func TestRecordsOfVersion2StillDecode(t *testing.T) {
	for i, fx := range v2Fixtures {
		b, err := hex.DecodeString(fx)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(fixtureInodes[i].encodeV2(nil)); got != fx {
			t.Fatalf("the test's version 2 encoder no longer writes fixture %d:\n got %s\nwant %s", i, got, fx)
		}
		out, err := decodeInode(fixtureInodes[i].Ino, b)
		if err != nil {
			t.Fatalf("fixture %d: %v", i, err)
		}
		if !reflect.DeepEqual(out, fixtureInodes[i]) {
			t.Errorf("fixture %d decodes as\n%+v\nwant\n%+v", i, out, fixtureInodes[i])
		}
	}
	seed := seedOf(t)
	r := rand.New(rand.NewPCG(seed, 0))
	for range 20000 {
		in := randomInode(r, false)                  // version 2 kept no link in the record
		out, err := decodeInode(0, in.encodeV2(nil)) // version 2 holds the number
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("seed %d: a version 2 record of\n%+v\ndecodes as\n%+v", seed, in, out)
		}
	}
}

func TestARecordOfVersion1IsTheOldFormat(t *testing.T) {
	if _, err := decodeInode(1, []byte{1, 2, 3}); err != ErrOldFormat {
		t.Fatalf("a version 1 record: %v", err)
	}
	for _, b := range [][]byte{nil, {0}, {4}, {0xff}} {
		if _, err := decodeInode(1, b); err == nil || err == ErrOldFormat {
			t.Errorf("record %x: %v", b, err)
		}
	}
}

// Version 3 writes an imported file's record, with its name, in under a
// third of the bytes version 2 took without it: the object once, its MD5
// ETag and ULID version id as raw bytes, the key without the name, the
// times once, the usual values not at all.
func TestVersion3WritesAnImportedFileShort(t *testing.T) {
	in := fixtureInodes[0]
	v2 := len(in.encodeV2(nil)) + 24 // and a link record of 24 bytes of key
	in.link = Link{Parent: 20000, Name: "f000034"}
	v3 := len(in.encode(nil))
	if v3 > 61 {
		t.Errorf("an imported file's record takes %d bytes (version 2: %d)", v3, v2)
	}
	if out, err := decodeInode(in.Ino, in.encode(nil)); err != nil || !reflect.DeepEqual(out, in) {
		t.Errorf("%+v decodes as %+v, %v", in, out, err)
	}
	t.Logf("an imported file's record: %d bytes, %d in version 2 with its link record's key", v3, v2)
	for _, in := range fixtureInodes {
		if out, err := decodeInode(in.Ino, in.encode(nil)); err != nil || !reflect.DeepEqual(out, in) {
			t.Errorf("%+v decodes as %+v, %v", in, out, err)
		}
	}
}

func TestVersion3RoundTripsRandomInodes(t *testing.T) {
	seed := seedOf(t)
	r := rand.New(rand.NewPCG(seed, 0))
	for range 50000 {
		in := randomInode(r, true)
		b := in.encode(nil)
		out, err := decodeInode(in.Ino, b)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("seed %d: a version 3 record of\n%+v\ndecodes as\n%+v", seed, in, out)
		}
		for _, n := range []int{1, 2, len(b) / 2, len(b) - 1} {
			if n < len(b) {
				if _, err := decodeInode(in.Ino, b[:n]); err == nil {
					t.Fatalf("seed %d: the first %d bytes of %d of the record of %+v decode", seed, n, len(b), in)
				}
			}
		}
	}
}

func TestEveryPrefixOfAVersion3RecordIsCorrupt(t *testing.T) {
	for _, in := range fixtureInodes {
		b := in.encode(nil)
		for n := range len(b) {
			if _, err := decodeInode(in.Ino, b[:n]); err == nil {
				t.Errorf("the first %d bytes of %d of the record of %+v decode", n, len(b), in)
			}
		}
	}
}

// A record of a later version 3 with fields this one does not know (mask
// bits above its own, their bytes at the end) reads as the fields it knows.
func TestVersion3IgnoresFieldsAddedAfterIt(t *testing.T) {
	in := fixtureInodes[1]
	b := in.encode(nil)
	// The mask follows the version byte and Mode.
	_, n := binary.Uvarint(b[1:])
	at := 1 + n
	mask, n3 := binary.Uvarint(b[at:])
	later := append([]byte(nil), b[:at]...)
	later = binary.AppendUvarint(later, mask|fUnfinishedWrite<<1)
	later = append(later, b[at+n3:]...)
	later = binary.AppendUvarint(later, 12345)
	out, err := decodeInode(in.Ino, later)
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("%+v, %v", out, err)
	}
}

func FuzzDecodeInode(f *testing.F) {
	for _, in := range fixtureInodes {
		f.Add(in.encode(nil))
		f.Add(in.encodeV2(nil))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := decodeInode(7, b)
		if err != nil {
			return
		}
		// Whatever decodes, encodes to a record that decodes the same.
		out, err := decodeInode(in.Ino, in.encode(nil))
		if err != nil || !reflect.DeepEqual(out, in) {
			t.Fatalf("%x decodes as %+v; encoded again, as %+v, %v", b, in, out, err)
		}
	})
}

func seedOf(t *testing.T) uint64 {
	seed := *inodeSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: -inode.seed=%d)", seed, seed)
	return seed
}

// randomInode makes an inode whose fields take their usual values, each
// other's values and the edges of their types often, and anything else
// sometimes.
func randomInode(r *rand.Rand, withLink bool) Inode {
	i64 := func() int64 {
		switch r.IntN(8) {
		case 0, 1:
			return 0
		case 2:
			return []int64{1, -1, math.MaxInt64, math.MinInt64, 1e9, -1e9}[r.IntN(6)]
		case 3:
			return r.Int64N(1<<40) * 1e9 // whole seconds
		case 4:
			return int64(r.Uint64())
		default:
			return r.Int64N(1 << 20)
		}
	}
	u64 := func() uint64 { return uint64(i64()) }
	u32 := func() uint32 { return uint32(u64()) }
	str := func() string {
		switch r.IntN(4) {
		case 0:
			return ""
		case 1:
			return "d/f" + string(rune('a'+r.IntN(26)))
		default:
			b := make([]byte, r.IntN(40))
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			return string(b)
		}
	}
	hexOf := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "0123456789abcdef"[r.IntN(16)]
		}
		return string(b)
	}
	etag := func() string {
		switch r.IntN(10) {
		case 0:
			return `"` + hexOf(32) + `"`
		case 1:
			return hexOf(32)
		case 2:
			return `"` + hexOf(32) + "-" + []string{"1", "0", "10000", "01", "-1", "", "18446744073709551615", "18446744073709551616"}[r.IntN(8)] + `"`
		case 3:
			return hexOf(32) + "-" + []string{"2", "0", "007", "x"}[r.IntN(4)]
		case 4:
			return `"` + hexOf(31+r.IntN(3)) + `"`
		case 5:
			return `"` + "0123456789ABCDEF0123456789abcdef" + `"` // upper case: kept as it is
		case 6:
			return []string{`"`, `""`, `"x`, hexOf(32) + `"`, `"` + hexOf(32)}[r.IntN(5)]
		}
		return str()
	}
	version := func() string {
		switch r.IntN(8) {
		case 0, 1:
			b := make([]byte, 26)
			for i := range b {
				b[i] = crockford[r.IntN(32)]
			}
			return string(b)
		case 2:
			return "01M98PN8FPS8MC9811AFR9PMML"[:26-r.IntN(2)] // L is not a digit; or 25 long
		case 3:
			return "8ZZZZZZZZZZZZZZZZZZZZZZZZZ" // over 128 bits
		case 4:
			u := hexOf(32)
			return u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
		case 5:
			return "3F2504E0-4F89-11D3-9A0C-0305E82C3301" // upper case: kept as it is
		case 6:
			return "null"
		}
		return str()
	}
	object := func() Object {
		if r.IntN(3) == 0 {
			return Object{}
		}
		return Object{Key: str(), ETag: etag(), VersionID: version(), Size: i64()}
	}
	in := Inode{Ino: Ino(u64()), Mode: u32(), Uid: u32(), Gid: u32(), Nlink: u32(), Rdev: u32(),
		Size: i64(), Mtime: i64(), Flags: Flags(u32()), Target: str(), Gen: u64(), Base: object(),
		Cached: i64(), Unexported: i64(), Replaced: u64(), Source: str(), UnfinishedWrite: i64()}
	if r.IntN(2) == 0 {
		in.Nlink = 1
	}
	in.Atime, in.Ctime, in.ExportedGen, in.Backed = in.Mtime, in.Mtime, in.Gen, in.Size
	if r.IntN(3) == 0 {
		in.Atime = i64()
	}
	if r.IntN(3) == 0 {
		in.Ctime = i64()
	}
	if r.IntN(3) == 0 {
		in.ExportedGen = u64()
	}
	if r.IntN(3) == 0 {
		in.Backed = i64()
	}
	if withLink && r.IntN(3) > 0 {
		in.link = Link{Parent: Ino(u64() | 1), Name: str()}
		if r.IntN(2) == 0 && in.Base != (Object{}) {
			in.Base.Key += in.link.Name
		}
	}
	if r.IntN(2) == 0 {
		in.Base.Size = in.Size
	}
	for range r.IntN(4) {
		k := object()
		if r.IntN(2) == 0 {
			k = in.Base
		}
		in.Keys = append(in.Keys, k)
	}
	return in
}

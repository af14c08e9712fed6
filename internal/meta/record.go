package meta

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// An inode is stored as one record under i<ino> (store.go), whose first
// byte is its version. inodeVersion 3 writes only what differs from a field's usual value,
// and the parts of an object version that S3 stores make in a known form
// as raw bytes (encode). Version 2 (encodeV2 in the tests) added Backed
// and Cached, when file data moved into the kv; decodeInode reads both.
const (
	inodeVersion   = 3
	inodeVersionV2 = 2
)

var errCorrupt = errors.New("meta: corrupt inode record")

// ErrOldFormat says the namespace was written by a bucketfs that kept file
// data outside the key-value store; this one cannot read it.
var ErrOldFormat = errors.New("meta: the state directory was made by an older bucketfs (file data kept in STATE_DIR/tier); " +
	"run that version once more and `bucketfs flush` to export everything, then start this one on a new state directory")

// The bits of a version 3 record's field mask. A field whose bit is clear
// has its usual value and takes no bytes; the others follow Mtime in the
// order of their bits. The most common bits come first, so that the mask
// of a file imported and not changed since fits in one byte. A later
// version may add bits above these for fields an earlier one can do
// without: their bytes come last, and a reader ignores what follows the
// fields it knows.
const (
	fMtimeSeconds    = 1 << iota // Mtime is written in whole seconds
	fFlags                       // Flags != 0
	fLink                        // link.Parent != 0: link.Parent, link.Name
	fBase                        // Base is not the zero Object
	fBaseKeyName                 // Base.Key ends with link.Name: written without it
	fKeysAreBase                 // Keys is Base alone: nothing written
	fSize                        // Size != 0
	fKeys                        // len(Keys) > 0, and not Base alone
	fUid                         // Uid != 0
	fGid                         // Gid != 0
	fGen                         // Gen != 0
	fExportedGen                 // ExportedGen != Gen
	fAtime                       // Atime != Mtime: written as Atime - Mtime
	fCtime                       // Ctime != Mtime: written as Ctime - Mtime
	fCached                      // Cached != 0
	fUnexported                  // Unexported != 0
	fBacked                      // Backed != Size
	fNlink                       // Nlink != 1
	fSource                      // Source != ""
	fTarget                      // Target != ""
	fRdev                        // Rdev != 0
	fReplaced                    // Replaced != 0
	fUnfinishedWrite             // UnfinishedWrite != 0
)

// encode writes the inode as a version 3 record: the version byte, Mode
// (packMode), the field mask, Mtime, then each field the mask names. Ino
// is not written: it is the record's key (decodeInode). Base.Key is
// written without its end when that is the name the record holds (an
// imported file's key ends with its name), Base.Size as its difference
// from Size (an imported file's are equal), Keys that hold Base alone (an
// imported file's) as a bit of the mask, and otherwise a Keys entry equal
// to Base as the single byte 0.
func (in *Inode) encode(b []byte) []byte {
	var mask uint64
	set := func(bit uint64, present bool) {
		if present {
			mask |= bit
		}
	}
	set(fMtimeSeconds, in.Mtime%1e9 == 0)
	set(fFlags, in.Flags != 0)
	set(fLink, in.link.Parent != 0)
	set(fBase, in.Base != Object{})
	set(fBaseKeyName, in.link.Parent != 0 && in.link.Name != "" && strings.HasSuffix(in.Base.Key, in.link.Name))
	keysAreBase := len(in.Keys) == 1 && in.Keys[0] == in.Base
	set(fKeysAreBase, keysAreBase)
	set(fKeys, len(in.Keys) > 0 && !keysAreBase)
	set(fSize, in.Size != 0)
	set(fUid, in.Uid != 0)
	set(fGid, in.Gid != 0)
	set(fGen, in.Gen != 0)
	set(fExportedGen, in.ExportedGen != in.Gen)
	set(fAtime, in.Atime != in.Mtime)
	set(fCtime, in.Ctime != in.Mtime)
	set(fCached, in.Cached != 0)
	set(fUnexported, in.Unexported != 0)
	set(fBacked, in.Backed != in.Size)
	set(fNlink, in.Nlink != 1)
	set(fSource, in.Source != "")
	set(fTarget, in.Target != "")
	set(fRdev, in.Rdev != 0)
	set(fReplaced, in.Replaced != 0)
	set(fUnfinishedWrite, in.UnfinishedWrite != 0)

	b = append(b, inodeVersion)
	b = binary.AppendUvarint(b, packMode(in.Mode))
	b = binary.AppendUvarint(b, mask)
	if mask&fMtimeSeconds != 0 {
		b = binary.AppendVarint(b, in.Mtime/1e9)
	} else {
		b = binary.AppendVarint(b, in.Mtime)
	}
	if mask&fFlags != 0 {
		b = binary.AppendUvarint(b, uint64(in.Flags))
	}
	if mask&fLink != 0 {
		b = binary.AppendUvarint(b, uint64(in.link.Parent))
		b = appendString(b, in.link.Name)
	}
	if mask&fBase != 0 {
		key := in.Base.Key
		if mask&fBaseKeyName != 0 {
			key = key[:len(key)-len(in.link.Name)]
		}
		b = appendString(b, key)
		b = in.Base.encodeVersion(b)
		b = binary.AppendVarint(b, in.Base.Size-in.Size) // wraps, as decode does
	}
	if mask&fSize != 0 {
		b = binary.AppendVarint(b, in.Size)
	}
	if mask&fKeys != 0 {
		b = binary.AppendUvarint(b, uint64(len(in.Keys)))
		for _, k := range in.Keys {
			if k == in.Base {
				b = append(b, 0)
				continue
			}
			b = binary.AppendUvarint(b, uint64(len(k.Key))+1)
			b = append(b, k.Key...)
			b = k.encodeVersion(b)
			b = binary.AppendVarint(b, k.Size)
		}
	}
	if mask&fUid != 0 {
		b = binary.AppendUvarint(b, uint64(in.Uid))
	}
	if mask&fGid != 0 {
		b = binary.AppendUvarint(b, uint64(in.Gid))
	}
	if mask&fGen != 0 {
		b = binary.AppendUvarint(b, in.Gen)
	}
	if mask&fExportedGen != 0 {
		b = binary.AppendUvarint(b, in.ExportedGen)
	}
	if mask&fAtime != 0 {
		b = binary.AppendVarint(b, in.Atime-in.Mtime)
	}
	if mask&fCtime != 0 {
		b = binary.AppendVarint(b, in.Ctime-in.Mtime)
	}
	if mask&fCached != 0 {
		b = binary.AppendVarint(b, in.Cached)
	}
	if mask&fUnexported != 0 {
		b = binary.AppendVarint(b, in.Unexported)
	}
	if mask&fBacked != 0 {
		b = binary.AppendVarint(b, in.Backed)
	}
	if mask&fNlink != 0 {
		b = binary.AppendUvarint(b, uint64(in.Nlink))
	}
	if mask&fSource != 0 {
		b = appendString(b, in.Source)
	}
	if mask&fTarget != 0 {
		b = appendString(b, in.Target)
	}
	if mask&fRdev != 0 {
		b = binary.AppendUvarint(b, uint64(in.Rdev))
	}
	if mask&fReplaced != 0 {
		b = binary.AppendUvarint(b, in.Replaced)
	}
	if mask&fUnfinishedWrite != 0 {
		b = binary.AppendVarint(b, in.UnfinishedWrite)
	}
	return b
}

// packMode puts a mode's file type (4 bits) below its permission bits (12)
// and the rest above both: the usual modes take two bytes as a uvarint
// (three as they are).
func packMode(m uint32) uint64 {
	return uint64(m>>12&0xf) | uint64(m&0o7777)<<4 | uint64(m>>16)<<16
}

func unpackMode(v uint64) uint32 {
	return uint32(v&0xf)<<12 | uint32(v>>4&0o7777) | uint32(v>>16)<<16
}

// The forms of an ETag in a version 3 record, the first uvarint of it: a
// 32-digit lower-case hex MD5, in quotes or bare, as 16 bytes; the same
// with a multipart suffix "-N" (N then follows as a uvarint); anything
// else as etagString plus its length, then its bytes.
const (
	etagQuotedMD5 = iota
	etagBareMD5
	etagQuotedMultipart
	etagBareMultipart
	etagString
)

// The forms of a version id: a ULID (26 characters of Crockford's base32,
// as versitygw makes them) or a lower-case UUID (as MinIO makes them) as
// 16 bytes; anything else as versionString plus its length, then its
// bytes.
const (
	versionULID = iota
	versionUUID
	versionString
)

// encodeVersion appends o's ETag and VersionID in their version 3 forms.
func (o *Object) encodeVersion(b []byte) []byte {
	b = appendETag(b, o.ETag)
	if v, ok := parseULID(o.VersionID); ok {
		b = append(b, versionULID)
		return append(b, v[:]...)
	}
	if v, ok := parseUUID(o.VersionID); ok {
		b = append(b, versionUUID)
		return append(b, v[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(o.VersionID))+versionString)
	return append(b, o.VersionID...)
}

func appendETag(b []byte, etag string) []byte {
	s := etag
	quoted := len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"'
	if quoted {
		s = s[1 : len(s)-1]
	}
	var md5 [16]byte
	if len(s) >= 32 && isLowerHex(s[:32]) {
		hex.Decode(md5[:], []byte(s[:32]))
		switch rest := s[32:]; {
		case rest == "":
			b = append(b, pick(quoted, etagQuotedMD5, etagBareMD5))
			return append(b, md5[:]...)
		case rest[0] == '-':
			if n, err := strconv.ParseUint(rest[1:], 10, 64); err == nil && strconv.FormatUint(n, 10) == rest[1:] {
				b = append(b, pick(quoted, etagQuotedMultipart, etagBareMultipart))
				b = append(b, md5[:]...)
				return binary.AppendUvarint(b, n)
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(etag))+etagString)
	return append(b, etag...)
}

func pick(quoted bool, ifQuoted, ifBare byte) byte {
	if quoted {
		return ifQuoted
	}
	return ifBare
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// crockford is the alphabet of a ULID, in the order of its digits.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// parseULID reads a ULID in its canonical form (upper case, a first
// digit of at most 7 so that it fits 128 bits), whose formatULID is s
// again.
func parseULID(s string) (v [16]byte, ok bool) {
	if len(s) != 26 || s[0] > '7' {
		return v, false
	}
	var hi, lo uint64
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(crockford, s[i])
		if d < 0 {
			return v, false
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(d)
	}
	binary.BigEndian.PutUint64(v[:8], hi)
	binary.BigEndian.PutUint64(v[8:], lo)
	return v, true
}

func formatULID(v [16]byte) string {
	hi, lo := binary.BigEndian.Uint64(v[:8]), binary.BigEndian.Uint64(v[8:])
	var s [26]byte
	for i := len(s) - 1; i >= 0; i-- {
		s[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(s[:])
}

// parseUUID reads a UUID written as 8-4-4-4-12 lower-case hex digits.
func parseUUID(s string) (v [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return v, false
	}
	h := s[:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if !isLowerHex(h) {
		return v, false
	}
	hex.Decode(v[:], []byte(h))
	return v, true
}

func formatUUID(v [16]byte) string {
	h := hex.EncodeToString(v[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads the fields encode wrote; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errCorrupt
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return d.bytes(d.uvarint()) }

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errCorrupt
	}
}

// bytes reads n bytes as a string.
func (d *decoder) bytes(n uint64) string {
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail()
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// version reads the ETag and VersionID encodeVersion wrote into o.
func (d *decoder) version(o *Object) {
	switch form := d.uvarint(); form {
	case etagQuotedMD5, etagBareMD5, etagQuotedMultipart, etagBareMultipart:
		md5 := d.bytes(16)
		if d.err != nil {
			return
		}
		o.ETag = hex.EncodeToString([]byte(md5))
		if form == etagQuotedMultipart || form == etagBareMultipart {
			o.ETag += "-" + strconv.FormatUint(d.uvarint(), 10)
		}
		if form == etagQuotedMD5 || form == etagQuotedMultipart {
			o.ETag = `"` + o.ETag + `"`
		}
	default:
		o.ETag = d.bytes(form - etagString)
	}
	switch form := d.uvarint(); form {
	case versionULID, versionUUID:
		var v [16]byte
		copy(v[:], d.bytes(16))
		if d.err != nil {
			return
		}
		if form == versionULID {
			o.VersionID = formatULID(v)
		} else {
			o.VersionID = formatUUID(v)
		}
	default:
		o.VersionID = d.bytes(form - versionString)
	}
}

func (d *decoder) object() Object {
	return Object{Key: d.string(), ETag: d.string(), VersionID: d.string(), Size: d.varint()}
}

// decodeInode reads the record of inode ino, of version 3 or 2 (which
// holds its number itself); one of version 1 is ErrOldFormat.
func decodeInode(ino Ino, b []byte) (Inode, error) {
	switch {
	case len(b) > 0 && b[0] == inodeVersion:
		return decodeV3(ino, b[1:])
	case len(b) > 0 && b[0] == inodeVersionV2:
		return decodeV2(b[1:])
	case len(b) > 0 && b[0] == 1:
		return Inode{}, ErrOldFormat
	}
	return Inode{}, errCorrupt
}

func decodeV3(ino Ino, b []byte) (Inode, error) {
	d := decoder{b: b}
	in := Inode{Ino: ino, Mode: unpackMode(d.uvarint()), Nlink: 1}
	mask := d.uvarint() // bits this version does not know name fields after its own
	in.Mtime = d.varint()
	if mask&fMtimeSeconds != 0 {
		in.Mtime *= 1e9
	}
	in.Atime, in.Ctime = in.Mtime, in.Mtime
	if mask&fFlags != 0 {
		in.Flags = Flags(d.uvarint())
	}
	if mask&fLink != 0 {
		in.link.Parent = Ino(d.uvarint())
		in.link.Name = d.string()
		if in.link.Parent == 0 {
			d.fail() // encode writes no link of parent 0
		}
	}
	var baseSize int64
	if mask&fBase != 0 {
		in.Base.Key = d.string()
		if mask&fBaseKeyName != 0 {
			in.Base.Key += in.link.Name
		}
		d.version(&in.Base)
		baseSize = d.varint()
	}
	if mask&fSize != 0 {
		in.Size = d.varint()
	}
	if mask&fBase != 0 {
		in.Base.Size = baseSize + in.Size
	}
	if mask&fKeysAreBase != 0 {
		in.Keys = []Object{in.Base}
	}
	if mask&fKeys != 0 {
		n := d.uvarint()
		if n > uint64(len(d.b)) { // each key takes at least one byte
			d.fail()
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			h := d.uvarint()
			if h == 0 {
				in.Keys = append(in.Keys, in.Base)
				continue
			}
			k := Object{Key: d.bytes(h - 1)}
			d.version(&k)
			k.Size = d.varint()
			in.Keys = append(in.Keys, k)
		}
	}
	in.Backed = in.Size
	if mask&fUid != 0 {
		in.Uid = uint32(d.uvarint())
	}
	if mask&fGid != 0 {
		in.Gid = uint32(d.uvarint())
	}
	if mask&fGen != 0 {
		in.Gen = d.uvarint()
	}
	in.ExportedGen = in.Gen
	if mask&fExportedGen != 0 {
		in.ExportedGen = d.uvarint()
	}
	if mask&fAtime != 0 {
		in.Atime = in.Mtime + d.varint()
	}
	if mask&fCtime != 0 {
		in.Ctime = in.Mtime + d.varint()
	}
	if mask&fCached != 0 {
		in.Cached = d.varint()
	}
	if mask&fUnexported != 0 {
		in.Unexported = d.varint()
	}
	if mask&fBacked != 0 {
		in.Backed = d.varint()
	}
	if mask&fNlink != 0 {
		in.Nlink = uint32(d.uvarint())
	}
	if mask&fSource != 0 {
		in.Source = d.string()
	}
	if mask&fTarget != 0 {
		in.Target = d.string()
	}
	if mask&fRdev != 0 {
		in.Rdev = uint32(d.uvarint())
	}
	if mask&fReplaced != 0 {
		in.Replaced = d.uvarint()
	}
	if mask&fUnfinishedWrite != 0 {
		in.UnfinishedWrite = d.varint()
	}
	if d.err != nil {
		return Inode{}, fmt.Errorf("decode inode %d: %w", in.Ino, d.err)
	}
	return in, nil
}

func decodeV2(b []byte) (Inode, error) {
	d := decoder{b: b}
	in := Inode{
		Ino:   Ino(d.uvarint()),
		Mode:  uint32(d.uvarint()),
		Uid:   uint32(d.uvarint()),
		Gid:   uint32(d.uvarint()),
		Nlink: uint32(d.uvarint()),
		Rdev:  uint32(d.uvarint()),
		Size:  d.varint(),
		Atime: d.varint(),
		Mtime: d.varint(),
		Ctime: d.varint(),
	}
	in.Flags = Flags(d.uvarint())
	in.Target = d.string()
	in.Gen = d.uvarint()
	in.ExportedGen = d.uvarint()
	in.Base = d.object()
	nkeys := d.uvarint()
	if nkeys > uint64(len(d.b)) { // each key takes at least one byte
		return Inode{}, errCorrupt
	}
	for i := uint64(0); i < nkeys && d.err == nil; i++ {
		in.Keys = append(in.Keys, d.object())
	}
	in.Source = d.string()
	in.Backed = d.varint()
	in.Cached = d.varint()
	in.Replaced = d.uvarint()
	if len(d.b) > 0 {
		in.Unexported = d.varint()
	} else if in.IsRegular() && in.Dirty() && in.Cached > 0 {
		// A record from before Unexported, when a dirty file counted
		// all its bytes as unexported: it goes on doing so.
		in.Unexported = in.Cached
		in.Flags |= unstamped
	}
	if len(d.b) > 0 {
		in.UnfinishedWrite = d.varint()
	}
	if d.err != nil {
		return Inode{}, fmt.Errorf("decode inode %d: %w", in.Ino, d.err)
	}
	return in, nil
}

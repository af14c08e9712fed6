package nfsclient

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// TestAttributeTableMatchesRFC8881 checks the codec table's numbering
// against the attribute list of RFC 8881 §5.6-5.8 and RFC 7862 §12.2,
// written out here independently of the nfsv4 package's constants.
func TestAttributeTableMatchesRFC8881(t *testing.T) {
	rfc := map[uint32]string{
		0: "supported_attrs", 1: "type", 2: "fh_expire_type", 3: "change", 4: "size",
		5: "link_support", 6: "symlink_support", 7: "named_attr", 8: "fsid", 9: "unique_handles",
		10: "lease_time", 11: "rdattr_error", 12: "acl", 13: "aclsupport", 14: "archive",
		15: "cansettime", 16: "case_insensitive", 17: "case_preserving", 18: "chown_restricted",
		19: "filehandle", 20: "fileid", 21: "files_avail", 22: "files_free", 23: "files_total",
		24: "fs_locations", 25: "hidden", 26: "homogeneous", 27: "maxfilesize", 28: "maxlink",
		29: "maxname", 30: "maxread", 31: "maxwrite", 32: "mimetype", 33: "mode", 34: "no_trunc",
		35: "numlinks", 36: "owner", 37: "owner_group", 38: "quota_avail_hard",
		39: "quota_avail_soft", 40: "quota_used", 41: "rawdev", 42: "space_avail",
		43: "space_free", 44: "space_total", 45: "space_used", 46: "system", 47: "time_access",
		48: "time_access_set", 49: "time_backup", 50: "time_create", 51: "time_delta",
		52: "time_metadata", 53: "time_modify", 54: "time_modify_set", 55: "mounted_on_fileid",
		56: "dir_notif_delay", 57: "dirent_notif_delay", 58: "dacl", 59: "sacl",
		74: "mode_set_masked", 75: "suppattr_exclcreat", 76: "fs_charset_cap",
		77: "clone_blksize", 78: "space_freed", 79: "change_attr_type",
	}
	for n, name := range rfc {
		if got := AttrName(n); got != name {
			t.Errorf("attribute %d is %q in the table, RFC says %q", n, got, name)
		}
	}
	for n := range attrFields {
		if _, ok := rfc[n]; !ok {
			t.Errorf("table has attribute %d (%s) the test does not know", n, AttrName(n))
		}
	}
}

// TestDecodeAttrsReadsHandEncodedValues decodes bytes written out by hand
// from the XDR rules, so a mistake shared by encoder and decoder shows.
func TestDecodeAttrsReadsHandEncodedValues(t *testing.T) {
	f := nfsv4.Fattr4{
		// type(1), size(4), fsid(8) in word 0; mode(33), owner(36),
		// time_modify(53) in word 1.
		Attrmask: []uint32{1<<1 | 1<<4 | 1<<8, 1<<1 | 1<<4 | 1<<21},
		AttrVals: []byte{
			0, 0, 0, 2, // type NF4DIR
			1, 2, 3, 4, 5, 6, 7, 8, // size
			0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 10, // fsid {9, 10}
			0, 0, 0x01, 0xed, // mode 0755
			0, 0, 0, 5, 'a', 'l', 'i', 'c', 'e', 0, 0, 0, // owner "alice" + 3 bytes padding
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, // time_modify -1 s + 1 ns
		},
	}
	a, err := DecodeAttrs(f)
	if err != nil {
		t.Fatal(err)
	}
	if a.Type != nfsv4.NF4DIR || a.Size != 0x0102030405060708 || a.FSID != (nfsv4.Fsid4{Major: 9, Minor: 10}) ||
		a.Mode != 0o755 || a.Owner != "alice" || !a.TimeModify.Equal(time.Unix(-1, 1)) {
		t.Fatalf("decoded %+v", a)
	}
	for _, n := range []uint32{1, 4, 8, 33, 36, 53} {
		if !a.Has(n) {
			t.Errorf("Has(%d) = false", n)
		}
	}
	if a.Has(nfsv4.FATTR4_FILEID) {
		t.Errorf("Has(fileid) = true for an attribute not sent")
	}
}

func TestAttrsRoundTripThroughEncodeAndDecode(t *testing.T) {
	full := Attrs{
		SupportedAttrs: Bitmap(0, 1, 4, 33, 75), Type: nfsv4.NF4REG, FHExpireType: 1, Change: 77,
		Size: 1 << 40, LinkSupport: true, SymlinkSupport: true, FSID: nfsv4.Fsid4{Major: 1, Minor: 2},
		UniqueHandles: true, LeaseTime: 90, RdattrError: nfsv4.NFS4ERR_ACCESS,
		ACL:        []nfsv4.Nfsace4{{Type: 0, Flag: 1, AccessMask: 2, Who: "OWNER@"}},
		ACLSupport: 3, CanSetTime: true, CasePreserving: true, ChownRestricted: true,
		FileHandle: []byte{1, 2, 3, 4, 5}, FileID: 42, FilesAvail: 1, FilesFree: 2, FilesTotal: 3,
		FSLocations: nfsv4.FsLocations4{FsRoot: []string{"a", "b"}, Locations: []nfsv4.FsLocation4{{Server: []string{"s"}, Rootpath: []string{"r"}}}},
		Homogeneous: true, MaxFileSize: 1 << 62, MaxLink: 255, MaxName: 255, MaxRead: 1 << 20,
		MaxWrite: 1 << 20, MimeType: "text/plain", Mode: 0o4755, NoTrunc: true, NumLinks: 3,
		Owner: "1000", OwnerGroup: "100", QuotaAvailHard: 5, QuotaAvailSoft: 6, QuotaUsed: 7,
		RawDev: nfsv4.Specdata4{Specdata1: 8, Specdata2: 1}, SpaceAvail: 10, SpaceFree: 11,
		SpaceTotal: 12, SpaceUsed: 4096,
		TimeAccess:    time.Unix(1700000000, 123456789).UTC(),
		TimeAccessSet: SetTime{ServerTime: true},
		TimeBackup:    time.Unix(-5, 0).UTC(), TimeCreate: time.Unix(1, 2).UTC(),
		TimeDelta:       time.Nanosecond,
		TimeMetadata:    time.Unix(1700000001, 0).UTC(),
		TimeModify:      time.Unix(1700000002, 999999999).UTC(),
		TimeModifySet:   SetTime{Time: time.Unix(1600000000, 5).UTC()},
		MountedOnFileID: 2, DirNotifDelay: time.Second, DirentNotifDelay: 2 * time.Second,
		DACL:              nfsv4.Nfsacl41{Na41Flag: 1, Na41Aces: []nfsv4.Nfsace4{{Who: "GROUP@"}}},
		SACL:              nfsv4.Nfsacl41{Na41Flag: 2},
		ModeSetMasked:     nfsv4.ModeMasked4{MmValueToSet: 0o644, MmMaskBits: 0o777},
		SuppattrExclcreat: Bitmap(4, 33), FSCharsetCap: 1, CloneBlksize: 4096, SpaceFreed: 9,
		ChangeAttrType: 1,
	}
	var all []uint32
	for n := range attrFields {
		all = append(all, n)
	}
	full.Mask = Bitmap(all...)
	tests := map[string]Attrs{
		"every supported attribute": full,
		"nothing":                   {},
		"setattr of mode and owner": Attrs{}.WithMode(0o600).WithOwner("0").WithOwnerGroup("0"),
		"setattr of size and times": Attrs{}.WithSize(0).WithAtime(SetTime{ServerTime: true}).
			WithMtime(SetTime{Time: time.Unix(5, 6).UTC()}),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			f, err := EncodeAttrs(&in)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.AttrVals)%4 != 0 {
				t.Fatalf("attr_vals is %d bytes, not a multiple of 4", len(f.AttrVals))
			}
			out, err := DecodeAttrs(f)
			if err != nil {
				t.Fatal(err)
			}
			in.Mask = bitmapTrim(in.Mask)
			if !reflect.DeepEqual(*out, in) {
				t.Fatalf("round trip changed the attributes:\n%s", diffFields(in, *out))
			}
		})
	}
}

func TestDecodeAttrsRejectsMalformedValues(t *testing.T) {
	word1 := func(bits ...uint32) []uint32 { return Bitmap(bits...) }
	tests := []struct {
		name string
		f    nfsv4.Fattr4
		want string
	}{
		{"truncated size", nfsv4.Fattr4{Attrmask: word1(4), AttrVals: []byte{0, 0, 0, 1}}, "size"},
		{"bytes left over", nfsv4.Fattr4{Attrmask: word1(33), AttrVals: []byte{0, 0, 1, 0xa4, 0, 0, 0, 0}}, "left after"},
		{"unknown attribute", nfsv4.Fattr4{Attrmask: word1(68), AttrVals: []byte{}}, "attribute 68"},
		{"bool that is 2", nfsv4.Fattr4{Attrmask: word1(5), AttrVals: []byte{0, 0, 0, 2}}, "link_support"},
		{"nseconds of a second or more", nfsv4.Fattr4{Attrmask: word1(53),
			AttrVals: []byte{0, 0, 0, 0, 0, 0, 0, 1, 0x3b, 0x9a, 0xca, 0x00}}, "out of range"},
		{"nonzero padding", nfsv4.Fattr4{Attrmask: word1(36), AttrVals: []byte{0, 0, 0, 1, 'x', 1, 0, 0}}, "padding"},
		{"owner longer than the buffer", nfsv4.Fattr4{Attrmask: word1(36), AttrVals: []byte{0x7f, 0xff, 0xff, 0xff}}, "opaque"},
		{"acl with absurd entry count", nfsv4.Fattr4{Attrmask: word1(12), AttrVals: []byte{0xff, 0xff, 0xff, 0xff}}, "acl"},
		{"invalid UTF-8 owner", nfsv4.Fattr4{Attrmask: word1(36), AttrVals: []byte{0, 0, 0, 1, 0xff, 0, 0, 0}}, "UTF-8"},
		{"bad time_how4", nfsv4.Fattr4{Attrmask: word1(54), AttrVals: []byte{0, 0, 0, 2}}, "time_how4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeAttrs(tc.f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestBitmapHelpers(t *testing.T) {
	bm := Bitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_MODE, nfsv4.FATTR4_SUPPATTR_EXCLCREAT)
	if want := []uint32{1 << 1, 1 << 1, 1 << 11}; !reflect.DeepEqual(bm, want) {
		t.Fatalf("Bitmap = %#x, want %#x", bm, want)
	}
	if got := BitmapAttrs(bm); !reflect.DeepEqual(got, []uint32{1, 33, 75}) {
		t.Fatalf("BitmapAttrs = %v", got)
	}
	if !BitmapHas(bm, 33) || BitmapHas(bm, 34) || BitmapHas(bm, 500) {
		t.Fatal("BitmapHas is wrong")
	}
	u := BitmapUnion(Bitmap(1), Bitmap(40))
	if !reflect.DeepEqual(u, []uint32{2, 1 << 8}) {
		t.Fatalf("BitmapUnion = %#x", u)
	}
	base := Attrs{}.WithMode(1)
	derived := base.WithSize(2)
	if base.Has(nfsv4.FATTR4_SIZE) || !derived.Has(nfsv4.FATTR4_MODE) {
		t.Fatal("With modified its receiver's mask or lost a bit")
	}
}

// diffFields lists the fields of two Attrs that differ.
func diffFields(a, b Attrs) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var s strings.Builder
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			fmt.Fprintf(&s, "%s: %#v vs %#v\n", va.Type().Field(i).Name, va.Field(i).Interface(), vb.Field(i).Interface())
		}
	}
	return s.String()
}

package nfsclient

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Attrs is a decoded fattr4. Mask says which fields hold values: a field
// whose attribute bit is clear is zero and means nothing. Decoding and
// encoding follow RFC 8881 §5 (attribute numbers in §5.6-5.8, XDR types
// from the protocol's .x file): values sit in attr_vals in ascending
// attribute number order, each in its own XDR type.
type Attrs struct {
	Mask []uint32

	// Mandatory attributes (RFC 8881 §5.6).
	SupportedAttrs    []uint32        // 0  bitmap4
	Type              nfsv4.NfsFtype4 // 1  nfs_ftype4
	FHExpireType      uint32          // 2  uint32_t
	Change            uint64          // 3  changeid4
	Size              uint64          // 4  uint64_t
	LinkSupport       bool            // 5  bool
	SymlinkSupport    bool            // 6  bool
	NamedAttr         bool            // 7  bool
	FSID              nfsv4.Fsid4     // 8  fsid4
	UniqueHandles     bool            // 9  bool
	LeaseTime         uint32          // 10 nfs_lease4
	RdattrError       nfsv4.Nfsstat4  // 11 nfsstat4
	FileHandle        []byte          // 19 nfs_fh4
	SuppattrExclcreat []uint32        // 75 bitmap4

	// Recommended attributes (RFC 8881 §5.7).
	ACL              []nfsv4.Nfsace4       // 12 nfsace4<>
	ACLSupport       uint32                // 13 uint32_t
	Archive          bool                  // 14 bool
	CanSetTime       bool                  // 15 bool
	CaseInsensitive  bool                  // 16 bool
	CasePreserving   bool                  // 17 bool
	ChownRestricted  bool                  // 18 bool
	FileID           uint64                // 20 uint64_t
	FilesAvail       uint64                // 21 uint64_t
	FilesFree        uint64                // 22 uint64_t
	FilesTotal       uint64                // 23 uint64_t
	FSLocations      nfsv4.FsLocations4    // 24 fs_locations4
	Hidden           bool                  // 25 bool
	Homogeneous      bool                  // 26 bool
	MaxFileSize      uint64                // 27 uint64_t
	MaxLink          uint32                // 28 uint32_t
	MaxName          uint32                // 29 uint32_t
	MaxRead          uint64                // 30 uint64_t
	MaxWrite         uint64                // 31 uint64_t
	MimeType         string                // 32 ascii_REQUIRED4
	Mode             uint32                // 33 mode4
	NoTrunc          bool                  // 34 bool
	NumLinks         uint32                // 35 uint32_t
	Owner            string                // 36 utf8str_mixed
	OwnerGroup       string                // 37 utf8str_mixed
	QuotaAvailHard   uint64                // 38 uint64_t
	QuotaAvailSoft   uint64                // 39 uint64_t
	QuotaUsed        uint64                // 40 uint64_t
	RawDev           nfsv4.Specdata4       // 41 specdata4
	SpaceAvail       uint64                // 42 uint64_t
	SpaceFree        uint64                // 43 uint64_t
	SpaceTotal       uint64                // 44 uint64_t
	SpaceUsed        uint64                // 45 uint64_t
	System           bool                  // 46 bool
	TimeAccess       time.Time             // 47 nfstime4
	TimeAccessSet    SetTime               // 48 settime4 (write only)
	TimeBackup       time.Time             // 49 nfstime4
	TimeCreate       time.Time             // 50 nfstime4
	TimeDelta        time.Duration         // 51 nfstime4
	TimeMetadata     time.Time             // 52 nfstime4
	TimeModify       time.Time             // 53 nfstime4
	TimeModifySet    SetTime               // 54 settime4 (write only)
	MountedOnFileID  uint64                // 55 uint64_t
	DirNotifDelay    time.Duration         // 56 nfstime4
	DirentNotifDelay time.Duration         // 57 nfstime4
	DACL             nfsv4.Nfsacl41        // 58 nfsacl41
	SACL             nfsv4.Nfsacl41        // 59 nfsacl41
	ModeSetMasked    nfsv4.ModeMasked4     // 74 mode_masked4
	FSCharsetCap     uint32                // 76 fs_charset_cap4
	CloneBlksize     uint32                // 77 uint32_t (RFC 7862)
	SpaceFreed       uint64                // 78 uint64_t (RFC 7862)
	ChangeAttrType   nfsv4.ChangeAttrType4 // 79 change_attr_type4 (RFC 7862)
}

// SetTime is a settime4: either the server's clock or a given time.
type SetTime struct {
	ServerTime bool
	Time       time.Time
}

// Has reports whether attribute attr is present.
func (a *Attrs) Has(attr uint32) bool { return BitmapHas(a.Mask, attr) }

// With marks attribute attr present, for attributes whose field was set
// directly. It returns a copy; the receiver's Mask is not modified.
func (a Attrs) With(attr uint32) Attrs {
	a.Mask = bitmapSet(slices.Clone(a.Mask), attr)
	return a
}

// WithMode, WithSize, WithOwner, WithOwnerGroup, WithAtime and WithMtime
// set one settable attribute, for SETATTR, CREATE and OPEN.
func (a Attrs) WithMode(mode uint32) Attrs { a.Mode = mode; return a.With(nfsv4.FATTR4_MODE) }
func (a Attrs) WithSize(size uint64) Attrs { a.Size = size; return a.With(nfsv4.FATTR4_SIZE) }
func (a Attrs) WithOwner(owner string) Attrs {
	a.Owner = owner
	return a.With(nfsv4.FATTR4_OWNER)
}
func (a Attrs) WithOwnerGroup(group string) Attrs {
	a.OwnerGroup = group
	return a.With(nfsv4.FATTR4_OWNER_GROUP)
}
func (a Attrs) WithAtime(t SetTime) Attrs {
	a.TimeAccessSet = t
	return a.With(nfsv4.FATTR4_TIME_ACCESS_SET)
}
func (a Attrs) WithMtime(t SetTime) Attrs {
	a.TimeModifySet = t
	return a.With(nfsv4.FATTR4_TIME_MODIFY_SET)
}

// CommonAttrs is the attribute set GetAttr callers usually want: what stat
// shows plus change and the handle-related mandatory attributes.
func CommonAttrs() []uint32 {
	return Bitmap(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_CHANGE, nfsv4.FATTR4_SIZE, nfsv4.FATTR4_FSID,
		nfsv4.FATTR4_FILEID, nfsv4.FATTR4_MODE, nfsv4.FATTR4_NUMLINKS, nfsv4.FATTR4_OWNER,
		nfsv4.FATTR4_OWNER_GROUP, nfsv4.FATTR4_RAWDEV, nfsv4.FATTR4_SPACE_USED,
		nfsv4.FATTR4_TIME_ACCESS, nfsv4.FATTR4_TIME_METADATA, nfsv4.FATTR4_TIME_MODIFY)
}

// DecodeAttrs decodes an fattr4. It fails on attributes it does not know
// (their length cannot be skipped), on truncated values and on bytes left
// over after the last value.
func DecodeAttrs(f nfsv4.Fattr4) (*Attrs, error) {
	a := &Attrs{Mask: bitmapTrim(slices.Clone(f.Attrmask))}
	d := newXDRDecoder(f.AttrVals)
	for _, n := range BitmapAttrs(a.Mask) {
		field, ok := attrFields[n]
		if !ok {
			return nil, fmt.Errorf("nfsclient: cannot decode attribute %d: not supported", n)
		}
		field.dec(d, a)
		if d.err != nil {
			return nil, fmt.Errorf("nfsclient: decoding attribute %s (%d): %w", field.name, n, d.err)
		}
	}
	if d.r.Len() != 0 {
		return nil, fmt.Errorf("nfsclient: %d bytes left after the last attribute", d.r.Len())
	}
	return a, nil
}

// EncodeAttrs encodes the attributes set in a.Mask, in bitmap order.
func EncodeAttrs(a *Attrs) (nfsv4.Fattr4, error) {
	var e xdrEncoder
	mask := bitmapTrim(slices.Clone(a.Mask))
	for _, n := range BitmapAttrs(mask) {
		field, ok := attrFields[n]
		if !ok {
			return nfsv4.Fattr4{}, fmt.Errorf("nfsclient: cannot encode attribute %d: not supported", n)
		}
		field.enc(&e, a)
	}
	if e.b == nil {
		e.b = []byte{}
	}
	return nfsv4.Fattr4{Attrmask: mask, AttrVals: e.b}, nil
}

// AttrName returns the RFC name of attribute attr, e.g. "owner_group".
func AttrName(attr uint32) string {
	if f, ok := attrFields[attr]; ok {
		return f.name
	}
	return fmt.Sprintf("attr%d", attr)
}

// attrField is how one attribute's value is read and written.
type attrField struct {
	name string
	dec  func(*xdrDecoder, *Attrs)
	enc  func(*xdrEncoder, *Attrs)
}

func u32Attr(name string, f func(*Attrs) *uint32) attrField {
	return attrField{name, func(d *xdrDecoder, a *Attrs) { *f(a) = d.u32() },
		func(e *xdrEncoder, a *Attrs) { e.u32(*f(a)) }}
}

func u64Attr(name string, f func(*Attrs) *uint64) attrField {
	return attrField{name, func(d *xdrDecoder, a *Attrs) { *f(a) = d.u64() },
		func(e *xdrEncoder, a *Attrs) { e.u64(*f(a)) }}
}

func boolAttr(name string, f func(*Attrs) *bool) attrField {
	return attrField{name, func(d *xdrDecoder, a *Attrs) { *f(a) = d.boolean() },
		func(e *xdrEncoder, a *Attrs) { e.boolean(*f(a)) }}
}

func utf8Attr(name string, f func(*Attrs) *string) attrField {
	return attrField{name, func(d *xdrDecoder, a *Attrs) { *f(a) = d.utf8() },
		func(e *xdrEncoder, a *Attrs) { e.str(*f(a)) }}
}

func bitmapAttr(name string, f func(*Attrs) *[]uint32) attrField {
	return attrField{name, func(d *xdrDecoder, a *Attrs) { *f(a) = d.bitmap() },
		func(e *xdrEncoder, a *Attrs) { e.bitmap(*f(a)) }}
}

func timeAttr(name string, f func(*Attrs) *time.Time) attrField {
	return attrField{name, func(d *xdrDecoder, a *Attrs) { *f(a) = d.nfstime() },
		func(e *xdrEncoder, a *Attrs) { e.nfstime(*f(a)) }}
}

func durationAttr(name string, f func(*Attrs) *time.Duration) attrField {
	return attrField{name, func(d *xdrDecoder, a *Attrs) { *f(a) = d.duration() },
		func(e *xdrEncoder, a *Attrs) { e.duration(*f(a)) }}
}

// settime4 is a union on time_how4: SET_TO_SERVER_TIME4 (0) is void,
// SET_TO_CLIENT_TIME4 (1) carries an nfstime4.
func setTimeAttr(name string, f func(*Attrs) *SetTime) attrField {
	return attrField{name,
		func(d *xdrDecoder, a *Attrs) {
			switch how := nfsv4.TimeHow4(d.u32()); how {
			case nfsv4.SET_TO_SERVER_TIME4:
				*f(a) = SetTime{ServerTime: true}
			case nfsv4.SET_TO_CLIENT_TIME4:
				*f(a) = SetTime{Time: d.nfstime()}
			default:
				d.fail(fmt.Errorf("time_how4 %d", how))
			}
		},
		func(e *xdrEncoder, a *Attrs) {
			if st := *f(a); st.ServerTime {
				e.u32(uint32(nfsv4.SET_TO_SERVER_TIME4))
			} else {
				e.u32(uint32(nfsv4.SET_TO_CLIENT_TIME4))
				e.nfstime(st.Time)
			}
		}}
}

// valueAttr handles attributes whose XDR type is a struct generated by
// go-xdr; p returns a pointer to the field, which implements both
// io.ReaderFrom and io.WriterTo.
func valueAttr[T any, P interface {
	*T
	ReadFrom(r io.Reader) (int64, error)
	WriteTo(w io.Writer) (int64, error)
}](name string, f func(*Attrs) *T) attrField {
	return attrField{name,
		func(d *xdrDecoder, a *Attrs) { d.value(P(f(a))) },
		func(e *xdrEncoder, a *Attrs) { e.value(P(f(a))) }}
}

// attrFields maps each supported attribute number to its codec. It is
// built once and never modified.
var attrFields = map[uint32]attrField{
	nfsv4.FATTR4_SUPPORTED_ATTRS: bitmapAttr("supported_attrs", func(a *Attrs) *[]uint32 { return &a.SupportedAttrs }),
	nfsv4.FATTR4_TYPE: {"type",
		func(d *xdrDecoder, a *Attrs) { a.Type = nfsv4.NfsFtype4(d.u32()) },
		func(e *xdrEncoder, a *Attrs) { e.u32(uint32(a.Type)) }},
	nfsv4.FATTR4_FH_EXPIRE_TYPE:  u32Attr("fh_expire_type", func(a *Attrs) *uint32 { return &a.FHExpireType }),
	nfsv4.FATTR4_CHANGE:          u64Attr("change", func(a *Attrs) *uint64 { return &a.Change }),
	nfsv4.FATTR4_SIZE:            u64Attr("size", func(a *Attrs) *uint64 { return &a.Size }),
	nfsv4.FATTR4_LINK_SUPPORT:    boolAttr("link_support", func(a *Attrs) *bool { return &a.LinkSupport }),
	nfsv4.FATTR4_SYMLINK_SUPPORT: boolAttr("symlink_support", func(a *Attrs) *bool { return &a.SymlinkSupport }),
	nfsv4.FATTR4_NAMED_ATTR:      boolAttr("named_attr", func(a *Attrs) *bool { return &a.NamedAttr }),
	nfsv4.FATTR4_FSID:            valueAttr("fsid", func(a *Attrs) *nfsv4.Fsid4 { return &a.FSID }),
	nfsv4.FATTR4_UNIQUE_HANDLES:  boolAttr("unique_handles", func(a *Attrs) *bool { return &a.UniqueHandles }),
	nfsv4.FATTR4_LEASE_TIME:      u32Attr("lease_time", func(a *Attrs) *uint32 { return &a.LeaseTime }),
	nfsv4.FATTR4_RDATTR_ERROR: {"rdattr_error",
		func(d *xdrDecoder, a *Attrs) { a.RdattrError = nfsv4.Nfsstat4(d.u32()) },
		func(e *xdrEncoder, a *Attrs) { e.u32(uint32(a.RdattrError)) }},
	nfsv4.FATTR4_ACL: {"acl",
		func(d *xdrDecoder, a *Attrs) {
			n := d.u32()
			// Each nfsace4 takes at least 16 bytes.
			if d.err == nil && int64(n)*16 > int64(d.r.Len()) {
				d.fail(fmt.Errorf("acl of %d entries with only %d bytes left", n, d.r.Len()))
			}
			for i := uint32(0); i < n && d.err == nil; i++ {
				var ace nfsv4.Nfsace4
				d.value(&ace)
				a.ACL = append(a.ACL, ace)
			}
		},
		func(e *xdrEncoder, a *Attrs) {
			e.u32(uint32(len(a.ACL)))
			for i := range a.ACL {
				e.value(&a.ACL[i])
			}
		}},
	nfsv4.FATTR4_ACLSUPPORT:       u32Attr("aclsupport", func(a *Attrs) *uint32 { return &a.ACLSupport }),
	nfsv4.FATTR4_ARCHIVE:          boolAttr("archive", func(a *Attrs) *bool { return &a.Archive }),
	nfsv4.FATTR4_CANSETTIME:       boolAttr("cansettime", func(a *Attrs) *bool { return &a.CanSetTime }),
	nfsv4.FATTR4_CASE_INSENSITIVE: boolAttr("case_insensitive", func(a *Attrs) *bool { return &a.CaseInsensitive }),
	nfsv4.FATTR4_CASE_PRESERVING:  boolAttr("case_preserving", func(a *Attrs) *bool { return &a.CasePreserving }),
	nfsv4.FATTR4_CHOWN_RESTRICTED: boolAttr("chown_restricted", func(a *Attrs) *bool { return &a.ChownRestricted }),
	nfsv4.FATTR4_FILEHANDLE: {"filehandle",
		func(d *xdrDecoder, a *Attrs) {
			a.FileHandle = d.opaque()
			if d.err == nil && len(a.FileHandle) > nfsv4.NFS4_FHSIZE {
				d.fail(fmt.Errorf("filehandle of %d bytes exceeds NFS4_FHSIZE", len(a.FileHandle)))
			}
		},
		func(e *xdrEncoder, a *Attrs) { e.opaque(a.FileHandle) }},
	nfsv4.FATTR4_FILEID:       u64Attr("fileid", func(a *Attrs) *uint64 { return &a.FileID }),
	nfsv4.FATTR4_FILES_AVAIL:  u64Attr("files_avail", func(a *Attrs) *uint64 { return &a.FilesAvail }),
	nfsv4.FATTR4_FILES_FREE:   u64Attr("files_free", func(a *Attrs) *uint64 { return &a.FilesFree }),
	nfsv4.FATTR4_FILES_TOTAL:  u64Attr("files_total", func(a *Attrs) *uint64 { return &a.FilesTotal }),
	nfsv4.FATTR4_FS_LOCATIONS: valueAttr("fs_locations", func(a *Attrs) *nfsv4.FsLocations4 { return &a.FSLocations }),
	nfsv4.FATTR4_HIDDEN:       boolAttr("hidden", func(a *Attrs) *bool { return &a.Hidden }),
	nfsv4.FATTR4_HOMOGENEOUS:  boolAttr("homogeneous", func(a *Attrs) *bool { return &a.Homogeneous }),
	nfsv4.FATTR4_MAXFILESIZE:  u64Attr("maxfilesize", func(a *Attrs) *uint64 { return &a.MaxFileSize }),
	nfsv4.FATTR4_MAXLINK:      u32Attr("maxlink", func(a *Attrs) *uint32 { return &a.MaxLink }),
	nfsv4.FATTR4_MAXNAME:      u32Attr("maxname", func(a *Attrs) *uint32 { return &a.MaxName }),
	nfsv4.FATTR4_MAXREAD:      u64Attr("maxread", func(a *Attrs) *uint64 { return &a.MaxRead }),
	nfsv4.FATTR4_MAXWRITE:     u64Attr("maxwrite", func(a *Attrs) *uint64 { return &a.MaxWrite }),
	nfsv4.FATTR4_MIMETYPE: {"mimetype",
		func(d *xdrDecoder, a *Attrs) { a.MimeType = d.ascii() },
		func(e *xdrEncoder, a *Attrs) { e.str(a.MimeType) }},
	nfsv4.FATTR4_MODE:              u32Attr("mode", func(a *Attrs) *uint32 { return &a.Mode }),
	nfsv4.FATTR4_NO_TRUNC:          boolAttr("no_trunc", func(a *Attrs) *bool { return &a.NoTrunc }),
	nfsv4.FATTR4_NUMLINKS:          u32Attr("numlinks", func(a *Attrs) *uint32 { return &a.NumLinks }),
	nfsv4.FATTR4_OWNER:             utf8Attr("owner", func(a *Attrs) *string { return &a.Owner }),
	nfsv4.FATTR4_OWNER_GROUP:       utf8Attr("owner_group", func(a *Attrs) *string { return &a.OwnerGroup }),
	nfsv4.FATTR4_QUOTA_AVAIL_HARD:  u64Attr("quota_avail_hard", func(a *Attrs) *uint64 { return &a.QuotaAvailHard }),
	nfsv4.FATTR4_QUOTA_AVAIL_SOFT:  u64Attr("quota_avail_soft", func(a *Attrs) *uint64 { return &a.QuotaAvailSoft }),
	nfsv4.FATTR4_QUOTA_USED:        u64Attr("quota_used", func(a *Attrs) *uint64 { return &a.QuotaUsed }),
	nfsv4.FATTR4_RAWDEV:            valueAttr("rawdev", func(a *Attrs) *nfsv4.Specdata4 { return &a.RawDev }),
	nfsv4.FATTR4_SPACE_AVAIL:       u64Attr("space_avail", func(a *Attrs) *uint64 { return &a.SpaceAvail }),
	nfsv4.FATTR4_SPACE_FREE:        u64Attr("space_free", func(a *Attrs) *uint64 { return &a.SpaceFree }),
	nfsv4.FATTR4_SPACE_TOTAL:       u64Attr("space_total", func(a *Attrs) *uint64 { return &a.SpaceTotal }),
	nfsv4.FATTR4_SPACE_USED:        u64Attr("space_used", func(a *Attrs) *uint64 { return &a.SpaceUsed }),
	nfsv4.FATTR4_SYSTEM:            boolAttr("system", func(a *Attrs) *bool { return &a.System }),
	nfsv4.FATTR4_TIME_ACCESS:       timeAttr("time_access", func(a *Attrs) *time.Time { return &a.TimeAccess }),
	nfsv4.FATTR4_TIME_ACCESS_SET:   setTimeAttr("time_access_set", func(a *Attrs) *SetTime { return &a.TimeAccessSet }),
	nfsv4.FATTR4_TIME_BACKUP:       timeAttr("time_backup", func(a *Attrs) *time.Time { return &a.TimeBackup }),
	nfsv4.FATTR4_TIME_CREATE:       timeAttr("time_create", func(a *Attrs) *time.Time { return &a.TimeCreate }),
	nfsv4.FATTR4_TIME_DELTA:        durationAttr("time_delta", func(a *Attrs) *time.Duration { return &a.TimeDelta }),
	nfsv4.FATTR4_TIME_METADATA:     timeAttr("time_metadata", func(a *Attrs) *time.Time { return &a.TimeMetadata }),
	nfsv4.FATTR4_TIME_MODIFY:       timeAttr("time_modify", func(a *Attrs) *time.Time { return &a.TimeModify }),
	nfsv4.FATTR4_TIME_MODIFY_SET:   setTimeAttr("time_modify_set", func(a *Attrs) *SetTime { return &a.TimeModifySet }),
	nfsv4.FATTR4_MOUNTED_ON_FILEID: u64Attr("mounted_on_fileid", func(a *Attrs) *uint64 { return &a.MountedOnFileID }),
	nfsv4.FATTR4_DIR_NOTIF_DELAY:   durationAttr("dir_notif_delay", func(a *Attrs) *time.Duration { return &a.DirNotifDelay }),
	nfsv4.FATTR4_DIRENT_NOTIF_DELAY: durationAttr("dirent_notif_delay",
		func(a *Attrs) *time.Duration { return &a.DirentNotifDelay }),
	nfsv4.FATTR4_DACL:               valueAttr("dacl", func(a *Attrs) *nfsv4.Nfsacl41 { return &a.DACL }),
	nfsv4.FATTR4_SACL:               valueAttr("sacl", func(a *Attrs) *nfsv4.Nfsacl41 { return &a.SACL }),
	nfsv4.FATTR4_MODE_SET_MASKED:    valueAttr("mode_set_masked", func(a *Attrs) *nfsv4.ModeMasked4 { return &a.ModeSetMasked }),
	nfsv4.FATTR4_SUPPATTR_EXCLCREAT: bitmapAttr("suppattr_exclcreat", func(a *Attrs) *[]uint32 { return &a.SuppattrExclcreat }),
	nfsv4.FATTR4_FS_CHARSET_CAP:     u32Attr("fs_charset_cap", func(a *Attrs) *uint32 { return &a.FSCharsetCap }),
	nfsv4.FATTR4_CLONE_BLKSIZE:      u32Attr("clone_blksize", func(a *Attrs) *uint32 { return &a.CloneBlksize }),
	nfsv4.FATTR4_SPACE_FREED:        u64Attr("space_freed", func(a *Attrs) *uint64 { return &a.SpaceFreed }),
	nfsv4.FATTR4_CHANGE_ATTR_TYPE: {"change_attr_type",
		func(d *xdrDecoder, a *Attrs) { a.ChangeAttrType = nfsv4.ChangeAttrType4(d.u32()) },
		func(e *xdrEncoder, a *Attrs) { e.u32(uint32(a.ChangeAttrType)) }},
}

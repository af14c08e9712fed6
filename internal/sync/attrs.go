package sync

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/meta"
)

// Metadata names (without the x-amz-meta- prefix).
const (
	mdMode    = "mode"
	mdUid     = "uid"
	mdGid     = "gid"
	mdMtime   = "mtime"
	mdMtimeNs = "bucketfs-mtime"
	mdRdev    = "rdev"
	// mdOrigin names the file system, inode and generation an object was
	// exported from, and the key it was written to, so that after a crash
	// the exporter recognises its own unrecorded uploads, and the importer
	// does not take them for bucket-side changes.
	mdOrigin = "bucketfs-origin"
)

// origin is the mdOrigin value for generation gen of ino in file system
// fsid, written to key: "FSID/INO/GEN#KEYHASH". The key is part of it
// because CopyObject keeps an object's metadata: a copy made in the bucket
// to another key carries the tag of the object it copies, and is a
// bucket-side write all the same.
func origin(fsid string, ino meta.Ino, gen uint64, key string) string {
	return inodeOrigin(fsid, ino) + "/" + strconv.FormatUint(gen, 10) + "#" + keyHash(key)
}

// keyHash is a short digest of key for an origin tag.
func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:6])
}

// inodeOrigin is the part of an mdOrigin value that names the inode.
func inodeOrigin(fsid string, ino meta.Ino) string {
	return fsid + "/" + strconv.FormatUint(uint64(ino), 10)
}

// originOf splits the mdOrigin value of the object at key into its file
// system and inode parts and its generation. ok is false for an object with
// no tag, and for one whose tag names another key (a copy made in the
// bucket); a tag without a key (written before keys were recorded) is taken
// as it is.
func originOf(md map[string]string, key string) (inode string, gen uint64, ok bool) {
	v, hash, hashed := strings.Cut(md[mdOrigin], "#")
	if hashed && hash != keyHash(key) {
		return "", 0, false
	}
	i := strings.LastIndexByte(v, '/')
	if i <= 0 {
		return "", 0, false
	}
	g, err := strconv.ParseUint(v[i+1:], 10, 64)
	return v[:i], g, err == nil
}

// ourInode returns the inode of this file system that wrote the object at
// key, from its origin tag.
func (im *Importer) ourInode(md map[string]string, key string) (meta.Ino, bool) {
	return ourInode(im.meta.Fsid(), md, key)
}

// ourInode returns the inode of file system fsid that wrote the object at
// key, from its origin tag.
func ourInode(fsid string, md map[string]string, key string) (meta.Ino, bool) {
	who, _, ok := originOf(md, key)
	id, num, found := strings.Cut(who, "/")
	if !ok || !found || id != fsid {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return meta.Ino(n), err == nil
}

// objectMetadata is the user metadata that records in's attributes and
// where the object came from.
func objectMetadata(in *meta.Inode, fsid, key string) map[string]string {
	m := map[string]string{
		mdMode:    strconv.FormatUint(uint64(in.Mode), 10),
		mdUid:     strconv.FormatUint(uint64(in.Uid), 10),
		mdGid:     strconv.FormatUint(uint64(in.Gid), 10),
		mdMtime:   strconv.FormatInt(in.Mtime/1e9, 10),
		mdMtimeNs: strconv.FormatInt(in.Mtime, 10),
		mdOrigin:  origin(fsid, in.Ino, in.Gen, key),
	}
	if t := in.Type(); t == syscall.S_IFCHR || t == syscall.S_IFBLK {
		m[mdRdev] = strconv.FormatUint(uint64(in.Rdev), 10)
	}
	return m
}

// attrsFromMetadata reads POSIX attributes back. What is missing or
// malformed is left to the file system's defaults (meta.Defaults): the
// flags in defaulted say which, and the permission bits, uid or gid they
// name are zero here. A missing mtime is the object's LastModified. dir
// says the object stands for a directory.
func attrsFromMetadata(md map[string]string, lastModified time.Time, dir bool) (mode, uid, gid, rdev uint32, mtime int64, defaulted meta.Flags) {
	mode = syscall.S_IFREG
	if dir {
		mode = syscall.S_IFDIR
	}
	if v, err := strconv.ParseUint(md[mdMode], 10, 32); err == nil {
		m := uint32(v)
		switch {
		case dir:
			mode = syscall.S_IFDIR | m&0o7777
		case m&syscall.S_IFMT == 0:
			mode = syscall.S_IFREG | m&0o7777
		default:
			switch m & syscall.S_IFMT {
			case syscall.S_IFREG, syscall.S_IFLNK, syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
				mode = m
			default: // a directory mode on a plain key: serve it as a file
				mode = syscall.S_IFREG | m&0o7777
			}
		}
	} else {
		defaulted |= meta.ModeDefaulted
	}
	if v, err := strconv.ParseUint(md[mdUid], 10, 32); err == nil {
		uid = uint32(v)
	} else {
		defaulted |= meta.UidDefaulted
	}
	if v, err := strconv.ParseUint(md[mdGid], 10, 32); err == nil {
		gid = uint32(v)
	} else {
		defaulted |= meta.GidDefaulted
	}
	if v, err := strconv.ParseUint(md[mdRdev], 10, 32); err == nil {
		rdev = uint32(v)
	}
	mtime = lastModified.UnixNano()
	if v, err := strconv.ParseInt(md[mdMtimeNs], 10, 64); err == nil {
		mtime = v
	} else if s := md[mdMtime]; s != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
			mtime = int64(f * 1e9)
		}
	}
	return mode, uid, gid, rdev, mtime, defaulted
}

// prefixDir is the directory a key prefix stands for: listings and
// HEADs give a prefix no attributes, so it shows the file system's
// defaults.
func prefixDir(name string, mtime int64) meta.Imported {
	return meta.Imported{Name: name, Mode: syscall.S_IFDIR, Mtime: mtime, Defaulted: meta.Defaulted}
}

// validSegment reports why a key segment cannot be a file name, or "".
func validSegment(name string) string {
	switch {
	case name == "":
		return "empty path segment"
	case name == "." || name == "..":
		return "dot segment"
	case len(name) > 255:
		return "segment longer than 255 bytes"
	case strings.ContainsRune(name, 0):
		return "NUL byte"
	case strings.ContainsRune(name, '/'):
		return "slash in a name"
	}
	return ""
}

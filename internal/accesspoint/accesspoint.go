// Package accesspoint describes access points: named entry points into a
// file system, each with a root directory inside it and an identity (uid,
// gid, supplementary groups) that replaces whatever the client claims, as
// S3 Files and EFS offer. Both front ends use it: the NFS server serves
// each access point as SERVER:/NAME, a FUSE mount may serve one as its
// root.
//
// This package owns the description (the type, the flag syntax and its
// errors) and the making of the root; confining a client to the root and
// running its requests as the identity is the front ends' part.
//
// # Syntax
//
//	NAME=PATH,uid=U,gid=G[,groups=A:B][,mode=0750]
//
// NAME is what clients ask for: letters, digits, '.', '_' and '-', at most
// 255 bytes, not "." or "..". PATH is absolute and names the root inside
// the file system; it may not hold a "." or ".." component nor a ','
// (which ends it). uid and gid are required, groups (colon-separated) and
// mode (octal, up to 07777, default 0755) are not. Each key appears at
// most once.
//
// # The root
//
// Root finds PATH when a server or mount starts, walking from the file
// system root without following symlinks, and makes what is missing as
// root: the directories above the root with mode 0755 owned by root, the
// root itself with the access point's mode, owned by its uid and gid. A
// root that exists is kept as it is (owner and mode too); one that is not
// a directory is an error. Everything is made through package vfs, so it
// is exported to the bucket like any directory.
package accesspoint

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"bucketfs/internal/meta"
	"bucketfs/internal/vfs"
)

// AccessPoint is one access point.
type AccessPoint struct {
	Name string
	// Path is the root directory, absolute and clean ("/" is the whole
	// file system).
	Path string
	// Cred is the identity every request through the access point runs
	// as, whatever the client claims.
	Cred vfs.Cred
	// Mode is the permission bits the root gets if Root makes it.
	Mode uint32
}

// DefaultMode is the mode of a root made without a mode= key.
const DefaultMode = 0o755

// Parse reads one access point in the flag syntax (see the package
// documentation). Its errors are one line and do not repeat s.
func Parse(s string) (AccessPoint, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return AccessPoint{}, errors.New("want NAME=PATH,uid=U,gid=G[,groups=A:B][,mode=0750]")
	}
	if err := checkName(name); err != nil {
		return AccessPoint{}, err
	}
	fields := strings.Split(rest, ",")
	ap := AccessPoint{Name: name, Path: fields[0], Mode: DefaultMode}
	if err := checkPath(ap.Path); err != nil {
		return AccessPoint{}, err
	}
	ap.Path = path.Clean(ap.Path) // only "//" and a trailing "/" go: "." and ".." are refused
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return AccessPoint{}, fmt.Errorf("%q is not KEY=VALUE (keys: uid, gid, groups, mode)", f)
		}
		if seen[key] {
			return AccessPoint{}, fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		var err error
		switch key {
		case "uid":
			ap.Cred.Uid, err = parseID(key, value)
		case "gid":
			ap.Cred.Gid, err = parseID(key, value)
		case "groups":
			ap.Cred.Groups, err = parseGroups(value)
		case "mode":
			ap.Mode, err = parseMode(value)
		default:
			err = fmt.Errorf("unknown key %q (keys: uid, gid, groups, mode)", key)
		}
		if err != nil {
			return AccessPoint{}, err
		}
	}
	switch {
	case !seen["uid"]:
		return AccessPoint{}, errors.New("uid= is required")
	case !seen["gid"]:
		return AccessPoint{}, errors.New("gid= is required")
	}
	return ap, nil
}

// checkName checks an access point's name.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty access point name")
	case strings.Contains(name, "/"):
		return fmt.Errorf("access point name %q has a '/'", name)
	case name == "." || name == "..":
		return fmt.Errorf("access point name %q is not a name", name)
	case len(name) > 255:
		return errors.New("access point name longer than 255 bytes")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("access point name %q: use only letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}

// checkPath checks an access point's root path.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q is not absolute", p)
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "." || c == "..":
			return fmt.Errorf("path %q has a %q component", p, c)
		case len(c) > 255:
			return fmt.Errorf("path %q has a component longer than 255 bytes", p)
		case strings.ContainsRune(c, 0):
			return fmt.Errorf("path %q has a NUL byte", p)
		}
	}
	return nil
}

// parseID reads a uid or gid: a decimal number below 2^32-1 (which
// chown(2) reserves).
func parseID(key, s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("%s=%q is not a number from 0 to 4294967294", key, s)
	}
	return uint32(n), nil
}

func parseGroups(s string) ([]uint32, error) {
	if s == "" {
		return nil, errors.New("groups= is empty (leave it out for none)")
	}
	var out []uint32
	for _, g := range strings.Split(s, ":") {
		n, err := parseID("groups", g)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func parseMode(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("mode=%q is not an octal mode from 0 to 07777", s)
	}
	return uint32(n), nil
}

// String is the access point in the flag syntax.
func (ap AccessPoint) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%s,uid=%d,gid=%d", ap.Name, ap.Path, ap.Cred.Uid, ap.Cred.Gid)
	if len(ap.Cred.Groups) > 0 {
		gs := make([]string, len(ap.Cred.Groups))
		for i, g := range ap.Cred.Groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		fmt.Fprintf(&b, ",groups=%s", strings.Join(gs, ":"))
	}
	fmt.Fprintf(&b, ",mode=%#o", ap.Mode)
	return b.String()
}

// List is a repeatable flag of access points (flag.Value); a NAME given
// twice is refused.
type List []AccessPoint

// Set parses one more access point.
func (l *List) Set(s string) error {
	ap, err := Parse(s)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(*l, func(o AccessPoint) bool { return o.Name == ap.Name }) {
		return fmt.Errorf("access point %q defined twice", ap.Name)
	}
	*l = append(*l, ap)
	return nil
}

func (l *List) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, ap := range *l {
		s[i] = ap.String()
	}
	return strings.Join(s, " ")
}

// Root returns the access point's root directory, making it and the
// directories above it if missing (see the package documentation).
func (ap *AccessPoint) Root(ctx context.Context, fs *vfs.FS) (vfs.Attr, error) {
	dir, err := fs.GetAttr(ctx, meta.RootIno)
	if err != nil {
		return vfs.Attr{}, fmt.Errorf("access point %s: %w", ap.Name, err)
	}
	if ap.Path == "/" {
		return dir, nil
	}
	comps := strings.Split(strings.TrimPrefix(ap.Path, "/"), "/")
	for i, c := range comps {
		last := i == len(comps)-1
		at := "/" + strings.Join(comps[:i+1], "/")
		next, err := fs.Lookup(ctx, vfs.Root, dir.Ino, c)
		if errors.Is(err, syscall.ENOENT) {
			if last {
				next, err = fs.MkdirOwned(ctx, dir.Ino, c, ap.Mode, ap.Cred.Uid, ap.Cred.Gid)
			} else {
				next, err = fs.MkdirOwned(ctx, dir.Ino, c, 0o755, 0, 0)
			}
			if errors.Is(err, syscall.EEXIST) {
				next, err = fs.Lookup(ctx, vfs.Root, dir.Ino, c) // made meanwhile
			}
		}
		if err != nil {
			return vfs.Attr{}, fmt.Errorf("access point %s: %s: %w", ap.Name, at, err)
		}
		if !next.IsDir() {
			return vfs.Attr{}, fmt.Errorf("access point %s: %s is not a directory", ap.Name, at)
		}
		dir = next
	}
	return dir, nil
}

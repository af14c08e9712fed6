package nfsclient

import (
	"context"
	"fmt"
	"strings"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// RootFH returns the root filehandle (PUTROOTFH, GETFH).
func (c *Client) RootFH(ctx context.Context) ([]byte, error) {
	return c.LookupPath(ctx, "/")
}

// LookupPath resolves a slash-separated path from the root in one
// compound: PUTROOTFH, one LOOKUP per component, GETFH. Empty components
// are skipped; "." and ".." are sent as names (NFSv4 has no such names,
// so a server should reject them).
func (c *Client) LookupPath(ctx context.Context, path string) ([]byte, error) {
	ops := []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_PUTROOTFH{}}
	for _, name := range strings.Split(path, "/") {
		if name != "" {
			ops = append(ops, lookup(name))
		}
	}
	ops = append(ops, getFH())
	res, err := c.Do(ctx, ops...)
	if err != nil {
		return nil, fmt.Errorf("lookup %q: %w", path, err)
	}
	return fhResult(res, len(ops)-1)
}

// StatPath is LookupPath followed by GETATTR of mask, still one compound.
func (c *Client) StatPath(ctx context.Context, path string, mask []uint32) ([]byte, *Attrs, error) {
	ops := []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_PUTROOTFH{}}
	for _, name := range strings.Split(path, "/") {
		if name != "" {
			ops = append(ops, lookup(name))
		}
	}
	ops = append(ops, getFH(), getAttr(mask))
	res, err := c.Do(ctx, ops...)
	if err != nil {
		return nil, nil, fmt.Errorf("stat %q: %w", path, err)
	}
	fh, err := fhResult(res, len(ops)-2)
	if err != nil {
		return nil, nil, err
	}
	a, err := attrResult(res, len(ops)-1)
	return fh, a, err
}

// Lookup returns the handle of name in dir.
func (c *Client) Lookup(ctx context.Context, dir []byte, name string) ([]byte, error) {
	res, err := c.Do(ctx, putFH(dir), lookup(name), getFH())
	if err != nil {
		return nil, err
	}
	return fhResult(res, 2)
}

// Mkdir creates directory name in dir (CREATE NF4DIR) with attrs (e.g.
// Attrs{}.WithMode(0o755)) and returns its handle.
func (c *Client) Mkdir(ctx context.Context, dir []byte, name string, attrs Attrs) ([]byte, error) {
	return c.create(ctx, dir, name, &nfsv4.Createtype4_default{Type: nfsv4.NF4DIR}, attrs)
}

// Symlink creates symbolic link name in dir pointing at target (CREATE
// NF4LNK) and returns its handle.
func (c *Client) Symlink(ctx context.Context, dir []byte, name, target string, attrs Attrs) ([]byte, error) {
	return c.create(ctx, dir, name, &nfsv4.Createtype4_NF4LNK{Linkdata: []byte(target)}, attrs)
}

// CreateObject creates a non-regular object of any type (CREATE): e.g.
// &nfsv4.Createtype4_default{Type: nfsv4.NF4FIFO} is not valid XDR for
// FIFOs, use &nfsv4.Createtype4_NF4FIFO{} instead.
func (c *Client) CreateObject(ctx context.Context, dir []byte, name string, objType nfsv4.Createtype4, attrs Attrs) ([]byte, error) {
	return c.create(ctx, dir, name, objType, attrs)
}

func (c *Client) create(ctx context.Context, dir []byte, name string, objType nfsv4.Createtype4, attrs Attrs) ([]byte, error) {
	fattr, err := EncodeAttrs(&attrs)
	if err != nil {
		return nil, err
	}
	res, err := c.Do(ctx, putFH(dir), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
		Objtype: objType, Objname: name, Createattrs: fattr,
	}}, getFH())
	if err != nil {
		return nil, err
	}
	return fhResult(res, 2)
}

// Readlink returns the target of symbolic link fh.
func (c *Client) Readlink(ctx context.Context, fh []byte) (string, error) {
	res, err := c.Do(ctx, putFH(fh), &nfsv4.NfsArgop4_OP_READLINK{})
	if err != nil {
		return "", err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_READLINK](res, 1)
	if err != nil {
		return "", err
	}
	ok, err := unionOK[*nfsv4.Readlink4res_NFS4_OK](r.Opreadlink)
	if err != nil {
		return "", err
	}
	return string(ok.Resok4.Link), nil
}

// Remove removes name (a file, link or empty directory) from dir.
func (c *Client) Remove(ctx context.Context, dir []byte, name string) error {
	_, err := c.Do(ctx, putFH(dir), &nfsv4.NfsArgop4_OP_REMOVE{Opremove: nfsv4.Remove4args{Target: name}})
	return err
}

// Rename moves oldName in srcDir to newName in dstDir (PUTFH src, SAVEFH,
// PUTFH dst, RENAME).
func (c *Client) Rename(ctx context.Context, srcDir []byte, oldName string, dstDir []byte, newName string) error {
	_, err := c.Do(ctx, putFH(srcDir), &nfsv4.NfsArgop4_OP_SAVEFH{}, putFH(dstDir),
		&nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{Oldname: oldName, Newname: newName}})
	return err
}

// Link makes a hard link to fh as name in dir (PUTFH fh, SAVEFH, PUTFH
// dir, LINK).
func (c *Client) Link(ctx context.Context, fh, dir []byte, name string) error {
	_, err := c.Do(ctx, putFH(fh), &nfsv4.NfsArgop4_OP_SAVEFH{}, putFH(dir),
		&nfsv4.NfsArgop4_OP_LINK{Oplink: nfsv4.Link4args{Newname: name}})
	return err
}

// DirEntry is one READDIR entry.
type DirEntry struct {
	Name   string
	Cookie uint64
	FileID uint64 // from Attrs; always requested
	Attrs  *Attrs
}

// DefaultReadDirMaxCount is the maxcount ReadDir asks for per READDIR.
const DefaultReadDirMaxCount = 64 << 10

// ReadDir lists dir completely, one READDIR compound per page, following
// cookies and the cookie verifier. FILEID is always added to mask.
func (c *Client) ReadDir(ctx context.Context, dir []byte, mask []uint32) ([]DirEntry, error) {
	var all []DirEntry
	var cookie uint64
	var verf [8]byte
	for {
		page, nextVerf, eof, err := c.ReadDirPage(ctx, dir, cookie, verf, mask, DefaultReadDirMaxCount)
		if err != nil {
			return all, err
		}
		all = append(all, page...)
		if eof {
			return all, nil
		}
		if len(page) == 0 {
			return all, fmt.Errorf("nfsclient: READDIR returned no entries and no EOF at cookie %d", cookie)
		}
		cookie, verf = page[len(page)-1].Cookie, nextVerf
	}
}

// ReadDirPage sends one READDIR from cookie with verifier verf and
// returns its entries, the new cookie verifier and whether the listing
// ended. maxCount bounds the reply; dircount is set to the same value.
func (c *Client) ReadDirPage(ctx context.Context, dir []byte, cookie uint64, verf [8]byte, mask []uint32, maxCount uint32) ([]DirEntry, [8]byte, bool, error) {
	mask = BitmapUnion(mask, Bitmap(nfsv4.FATTR4_FILEID))
	res, err := c.Do(ctx, putFH(dir), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{
		Cookie: cookie, Cookieverf: verf, Dircount: maxCount, Maxcount: maxCount, AttrRequest: mask,
	}})
	if err != nil {
		return nil, verf, false, err
	}
	r, err := resultAt[*nfsv4.NfsResop4_OP_READDIR](res, 1)
	if err != nil {
		return nil, verf, false, err
	}
	ok, err := unionOK[*nfsv4.Readdir4res_NFS4_OK](r.Opreaddir)
	if err != nil {
		return nil, verf, false, err
	}
	var entries []DirEntry
	for e := ok.Resok4.Reply.Entries; e != nil; e = e.Nextentry {
		a, err := DecodeAttrs(e.Attrs)
		if err != nil {
			return nil, verf, false, fmt.Errorf("entry %q: %w", e.Name, err)
		}
		entries = append(entries, DirEntry{Name: e.Name, Cookie: e.Cookie, FileID: a.FileID, Attrs: a})
	}
	return entries, ok.Resok4.Cookieverf, ok.Resok4.Reply.Eof, nil
}

func lookup(name string) nfsv4.NfsArgop4 {
	return &nfsv4.NfsArgop4_OP_LOOKUP{Oplookup: nfsv4.Lookup4args{Objname: name}}
}

package s3local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// versitygw's posix backend keeps the multipart uploads of a key in
// BUCKET/.sgwtmp/multipart/HASH/UPLOAD_ID, HASH naming the key, and names
// the key on HASH with the xattr user.objname, which it sets right after it
// makes the upload's directory. A crash of this process between the two
// (the store runs in bucketfs's process, so a kill -9 of bucketfs is one)
// leaves a directory that no listing shows until a later upload of the same
// key sets the name, when the broken upload, never acknowledged to anyone,
// turns up as one in progress that nothing aborts. Such directories are
// removed at start, before the store serves.
const (
	multipartDir = ".sgwtmp/multipart"
	objNameAttr  = "user.objname"
)

// dropUnnamedUploads removes, in every bucket under dataDir, the multipart
// directories whose key was never named: the uploads in them were never
// created as far as any client knows.
func dropUnnamedUploads(dataDir string) error {
	buckets, err := os.ReadDir(dataDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range buckets {
		if !b.IsDir() {
			continue
		}
		dir := filepath.Join(dataDir, b.Name(), multipartDir)
		keys, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, k := range keys {
			if !k.IsDir() {
				continue
			}
			p := filepath.Join(dir, k.Name())
			_, err := unix.Getxattr(p, objNameAttr, nil)
			switch {
			case err == nil:
			case errors.Is(err, unix.ENODATA):
				if err := os.RemoveAll(p); err != nil {
					errs = append(errs, err)
				}
			default:
				errs = append(errs, fmt.Errorf("read %s of %s: %w", objNameAttr, p, err))
			}
		}
	}
	return errors.Join(errs...)
}

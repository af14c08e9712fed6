package s3local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

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

// versitygw's posix backend puts an object over an existing one by linking
// the new data to a temporary name beside it, .NAME.sgwtmp.NANOS, and
// renaming that onto the key. A crash of this process between the two
// leaves the temporary name, which listings show as an object no client
// ever put. runningMark, a file in the store's directory from start to a
// clean close, tells a start that follows a crash, which removes such names
// before the store serves (only then: it walks every bucket).
const runningMark = "running"

var tempName = regexp.MustCompile(`^\..+\.sgwtmp\.[0-9]+$`)

// dropTempNames removes the temporary names of interrupted puts in every
// bucket under dataDir.
func dropTempNames(dataDir string) error {
	var errs []error
	err := filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			errs = append(errs, err)
			return nil
		case d.IsDir() && d.Name() == ".sgwtmp":
			return filepath.SkipDir // the backend's own work area
		case d.Type().IsRegular() && tempName.MatchString(d.Name()):
			if err := os.Remove(p); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

package meta

import (
	"errors"
	"fmt"
	"syscall"

	"bucketfs/internal/kv"
)

// LostFoundMode is the permission bits of the lost+found directory: shared
// as /tmp is. Everyone may list the names of the saved files (a name is the
// key's path and the time of the conflict) and reach a saved file by name;
// what a saved file holds is guarded by its own owner and mode, which it
// keeps from the file it was (a move of the inode, or a copy of it for a
// file with other names). The sticky bit lets only a saved file's owner
// (or the directory's owner, or root) remove or rename it.
const LostFoundMode = syscall.S_ISVTX | 0o777

// keyLostFoundShared marks a file system whose lost+found has been given
// LostFoundMode: made so, or, for one made when lost+found was 0700, moved
// to it once at a start (shareLostFound). Invariant: once it is set, no
// start changes lost+found's mode again, so a mode its owner sets later
// stays; nothing else sets lost+found's mode (it takes no defaults, and
// imports never reach it).
var keyLostFoundShared = []byte("c/lost+found-shared")

// shareLostFound gives the lost+found directory of a file system made
// before it was shared (0700) LostFoundMode, once: a lost+found whose mode
// someone changed from 0700 keeps it. The caller syncs the kv before the
// store is used, so the change is durable before anything is saved there.
func (s *Store) shareLostFound(tx kv.Txn) error {
	if _, err := tx.Get(keyLostFoundShared); err == nil {
		return nil
	} else if !errors.Is(err, kv.ErrNotFound) {
		return err
	}
	ino, err := getEntry(tx, RootIno, s.LostFoundName())
	if err != nil {
		return fmt.Errorf("lost+found: %w", err)
	}
	lf, err := s.getInode(tx, ino)
	if err != nil {
		return fmt.Errorf("lost+found: %w", err)
	}
	if lf.Mode&0o7777 == 0o700 {
		lf.Mode = lf.Type() | LostFoundMode
		lf.Ctime = s.now().UnixNano()
		if err := s.putInode(tx, &lf); err != nil {
			return err
		}
	}
	return tx.Set(keyLostFoundShared, nil)
}

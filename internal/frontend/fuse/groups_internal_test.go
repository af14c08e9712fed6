package fuse

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// procFile is a /proc/PID/status file as Linux writes it, with the Uid, Gid
// and Groups lines given.
func procFile(uid, gid, groups string) string {
	return "Name:\tcat\nUmask:\t0022\nState:\tR (running)\nTgid:\t42\nPid:\t42\nPPid:\t1\n" +
		"Uid:\t" + uid + "\nGid:\t" + gid + "\nFDSize:\t64\nGroups:\t" + groups + "\nNStgid:\t42\n" +
		"VmRSS:\t    1024 kB\nvoluntary_ctxt_switches:\t1\n"
}

func TestProcStatusGroupsParsingTakesGroupsAwayOnAnythingOdd(t *testing.T) {
	ids := "1000\t1001\t1002\t2000"
	for _, tc := range []struct {
		name       string
		in         string
		ok         bool
		uid, gid   uint32
		wantGroups []uint32
	}{
		{"a real file; the fs ids are the fourth", procFile(ids, "7\t8\t9\t3000", "3000 4000 65534 4294967295 "), true, 2000, 3000, []uint32{3000, 4000, 65534, 4294967295}},
		{"no supplementary groups", procFile(ids, ids, ""), true, 2000, 2000, nil},
		{"empty", "", false, 0, 0, nil},
		{"no Groups line", "Uid:\t" + ids + "\nGid:\t" + ids + "\n", false, 0, 0, nil},
		{"no Uid line", "Gid:\t" + ids + "\nGroups:\t3000\n", false, 0, 0, nil},
		{"Groups line cut short", "Uid:\t" + ids + "\nGid:\t" + ids + "\nGroups:\t30", false, 0, 0, nil},
		{"Groups line twice", procFile(ids, ids, "3000") + "Groups:\t4000\n", false, 0, 0, nil},
		{"Uid line twice", procFile(ids, ids, "3000") + "Uid:\t0\t0\t0\t0\n", false, 0, 0, nil},
		{"Uid with three ids", procFile("1\t2\t3", ids, "3000"), false, 0, 0, nil},
		{"Gid with five ids", procFile(ids, "1 2 3 4 5", "3000"), false, 0, 0, nil},
		{"a word among the groups", procFile(ids, ids, "3000 wheel"), false, 0, 0, nil},
		{"a negative group", procFile(ids, ids, "-1"), false, 0, 0, nil},
		{"a signed group", procFile(ids, ids, "+3000"), false, 0, 0, nil},
		{"a hex group", procFile(ids, ids, "0x10"), false, 0, 0, nil},
		{"a group past 32 bits", procFile(ids, ids, "4294967296"), false, 0, 0, nil},
		{"a NUL in a group", procFile(ids, ids, "3000\x00"), false, 0, 0, nil},
		{"a negative uid", procFile("-1 -1 -1 -1", ids, "3000"), false, 0, 0, nil},
		{"more groups than the kernel allows", procFile(ids, ids, strings.Repeat("1 ", maxGroups+1)), false, 0, 0, nil},
		{"a key spelled differently", strings.Replace(procFile(ids, ids, "3000"), "Groups:", "Groups :", 1), false, 0, 0, nil},
		{"lines without a colon and binary noise", "\x00\xff\n:\n::::\n\n" + procFile(ids, ids, "3000"), true, 2000, 2000, []uint32{3000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, ok := parseStatus([]byte(tc.in))
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				if st.uid != 0 || st.gid != 0 || st.groups != nil {
					t.Fatalf("a refused file gave %+v", st)
				}
				return
			}
			if st.uid != tc.uid || st.gid != tc.gid || !slices.Equal(st.groups, tc.wantGroups) {
				t.Fatalf("got uid %d gid %d groups %v, want %d %d %v", st.uid, st.gid, st.groups, tc.uid, tc.gid, tc.wantGroups)
			}
		})
	}
}

// FuzzProcStatusGroupsParsing: no input makes the parser panic, and what
// it accepts names no more groups than the kernel allows.
func FuzzProcStatusGroupsParsing(f *testing.F) {
	f.Add([]byte(procFile("0\t0\t0\t0", "0\t0\t0\t0", "1 2 3")))
	f.Add([]byte("Uid:\nGid:\nGroups:\n"))
	f.Add([]byte{0xff, '\n', ':', '\n'})
	f.Fuzz(func(t *testing.T, b []byte) {
		if st, ok := parseStatus(b); ok && len(st.groups) > maxGroups {
			t.Fatalf("%d groups", len(st.groups))
		}
	})
}

// fakeProc is a /proc whose status files a test writes, counting reads.
type fakeProc struct {
	files map[uint32]string
	reads int
}

func (p *fakeProc) read(pid uint32) ([]byte, error) {
	p.reads++
	s, ok := p.files[pid]
	if !ok {
		return nil, errors.New("no such process")
	}
	return []byte(s), nil
}

func TestCallersGroupsAreReadOncePerPidAndSecondAndOnlyForTheirIdentity(t *testing.T) {
	proc := &fakeProc{files: map[uint32]string{
		42: procFile("2000 2000 2000 2000", "2000 2000 2000 2000", "3000"),
		43: "garbage",
	}}
	now := time.Unix(1_000_000, 0)
	cs := newCallers()
	cs.read, cs.now = proc.read, func() time.Time { return now }
	h := func(pid, uid, gid uint32) *fuse.InHeader {
		return &fuse.InHeader{Caller: fuse.Caller{Owner: fuse.Owner{Uid: uid, Gid: gid}, Pid: pid}}
	}
	expect := func(what string, hdr *fuse.InHeader, groups []uint32, reads int) {
		t.Helper()
		c := cs.cred(hdr)
		if c.Uid != hdr.Uid || c.Gid != hdr.Gid || !slices.Equal(c.Groups, groups) {
			t.Fatalf("%s: cred %+v, want %d:%d groups %v", what, c, hdr.Uid, hdr.Gid, groups)
		}
		if proc.reads != reads {
			t.Fatalf("%s: %d reads of /proc so far, want %d", what, proc.reads, reads)
		}
	}

	expect("first request", h(42, 2000, 2000), []uint32{3000}, 1)
	now = now.Add(groupsTTL - time.Nanosecond)
	expect("within the TTL", h(42, 2000, 2000), []uint32{3000}, 1)
	now = now.Add(time.Nanosecond)
	expect("at the TTL", h(42, 2000, 2000), []uint32{3000}, 2)
	// A request of another identity under the same pid (the pid reused,
	// or the process changed its ids) does not get the cached groups,
	// nor those of a file that names other ids.
	expect("another uid", h(42, 2001, 2000), nil, 3)
	expect("another gid", h(42, 2000, 2001), nil, 4)
	expect("the kernel's own request", h(0, 0, 0), nil, 4)
	expect("a process gone", h(7, 2000, 2000), nil, 5)
	expect("an unreadable status", h(43, 2000, 2000), nil, 6)

	// The cache stays bounded however many processes call.
	for pid := uint32(100); pid < 100+3*maxCallers; pid++ {
		proc.files[pid] = proc.files[42]
		cs.cred(h(pid, 2000, 2000))
		if len(cs.pids) > maxCallers {
			t.Fatalf("%d pids cached, more than %d", len(cs.pids), maxCallers)
		}
	}
}

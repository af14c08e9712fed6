package nfs4

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/engine"
)

// versions lists every object version and delete marker of the bucket.
func (e *env) versions() []string {
	e.t.Helper()
	var out []string
	p := s3.NewListObjectVersionsPaginator(e.s3, &s3.ListObjectVersionsInput{Bucket: &e.bucket})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		for _, v := range page.Versions {
			out = append(out, aws.ToString(v.Key)+"@"+aws.ToString(v.VersionId))
		}
		for _, d := range page.DeleteMarkers {
			out = append(out, aws.ToString(d.Key)+"@"+aws.ToString(d.VersionId)+" (delete marker)")
		}
	}
	slices.Sort(out)
	return out
}

func readOnly(c *engine.Config) { c.ReadOnly = true }

// A read-only server (serve --read-only) answers NFS4ERR_ROFS to every
// change, grants no write access, serves reads, and writes nothing to the
// bucket (issue 13).
func TestAReadOnlyServerAnswersROFS(t *testing.T) {
	e := newEnv(t, Options{}, readOnly)
	e.put("file.txt", []byte("in the bucket"))
	e.put("dir/inner.txt", []byte("inner"))
	c := e.dial(1, rootCred)
	c.session("read-only")
	before := e.versions()

	out := c.do(putroot(), lookup("file.txt"), getfh(), getattr(testAttrMask...))
	if a := attrsOf(t, out[3]); a.size != uint64(len("in the bucket")) {
		t.Fatalf("file.txt: %+v", a)
	}
	var sid nfsv4.Stateid4
	out = c.do(putroot(), lookup("file.txt"), readOp(sid, 0, 100))
	if got := string(readOK(t, out[2]).Data); got != "in the bucket" {
		t.Fatalf("READ of a read-only server: %q", got)
	}
	var mode xdrBuf
	mode.u32(0o600)
	for _, tc := range []struct {
		what string
		ops  []nfsv4.NfsArgop4
	}{
		{"CREATE of a directory", []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
			Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "newdir"}}}},
		{"CREATE of a symlink", []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
			Objtype: &nfsv4.Createtype4_NF4LNK{Linkdata: []byte("file.txt")}, Objname: "link"}}}},
		{"OPEN with create", []nfsv4.NfsArgop4{putroot(), openArgs(c, 0, "o", "new.txt", nfsv4.OPEN4_SHARE_ACCESS_WRITE, unchecked(0o644))}},
		{"OPEN for writing", []nfsv4.NfsArgop4{putroot(), openArgs(c, 0, "o", "file.txt", nfsv4.OPEN4_SHARE_ACCESS_BOTH, nil)}},
		{"WRITE", []nfsv4.NfsArgop4{putroot(), lookup("file.txt"), writeOp(sid, 0, []byte("x"), nfsv4.FILE_SYNC4)}},
		{"SETATTR of the mode", []nfsv4.NfsArgop4{putroot(), lookup("file.txt"), &nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{
			ObjAttributes: nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_MODE).words(), AttrVals: mode}}}}},
		{"REMOVE of a file", []nfsv4.NfsArgop4{putroot(), remove("file.txt")}},
		{"REMOVE of a directory", []nfsv4.NfsArgop4{putroot(), remove("dir")}},
		{"RENAME", []nfsv4.NfsArgop4{putroot(), savefh(), &nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{
			Oldname: "file.txt", Newname: "moved.txt"}}}},
		{"LINK", []nfsv4.NfsArgop4{putroot(), lookup("file.txt"), savefh(), putroot(), &nfsv4.NfsArgop4_OP_LINK{
			Oplink: nfsv4.Link4args{Newname: "hard"}}}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			if _, st := c.call(tc.ops...); st != nfsv4.NFS4ERR_ROFS {
				t.Errorf("%s on a read-only server: %s, want NFS4ERR_ROFS", tc.what, nfsv4.Nfsstat4_name[st])
			}
		})
	}
	// ACCESS grants reading, not changing.
	out = c.do(putroot(), lookup("file.txt"), &nfsv4.NfsArgop4_OP_ACCESS{Opaccess: nfsv4.Access4args{
		Access: nfsv4.ACCESS4_READ | nfsv4.ACCESS4_MODIFY | nfsv4.ACCESS4_EXTEND}})
	acc := out[2].(*nfsv4.NfsResop4_OP_ACCESS).Opaccess.(*nfsv4.Access4res_NFS4_OK).Resok4
	if acc.Access != nfsv4.ACCESS4_READ {
		t.Errorf("ACCESS on a read-only server grants %#x, want read only", acc.Access)
	}
	c.do(putroot(), lookup("file.txt")) // still there
	if after := e.versions(); !slices.Equal(before, after) {
		t.Fatalf("a read-only server wrote to the bucket:\nbefore %q\nafter  %q", before, after)
	}
	if n, _, err := e.eng.Meta.QueueStats(context.Background()); err != nil || n != 0 {
		t.Fatalf("%d exports queued (%v) on a read-only server", n, err)
	}
}

package nfs4

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// lockedBuffer collects log output from concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fuzzSeeds are valid COMPOUNDs the fuzzer starts from (besides the
// corpus in testdata/fuzz/FuzzCompound).
func fuzzSeeds() [][]byte {
	var attrs xdrBuf
	attrs.u32(0o644)
	mode := nfsv4.Fattr4{Attrmask: maskFrom(nfsv4.FATTR4_MODE).words(), AttrVals: attrs}
	owner := nfsv4.StateOwner4{Clientid: 1, Owner: []byte("fuzz")}
	return [][]byte{
		encodeArgs("a", 0, []nfsv4.NfsArgop4{putroot(), getfh(), getattr(testAttrMask...), lookup("x"), lookupp()}),
		encodeArgs("b", 0, []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_READDIR{Opreaddir: nfsv4.Readdir4args{
			Maxcount: 4096, AttrRequest: maskFrom(nfsv4.FATTR4_TYPE, nfsv4.FATTR4_RDATTR_ERROR).words()}}}),
		encodeArgs("c", 0, []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_CREATE{Opcreate: nfsv4.Create4args{
			Objtype: &nfsv4.Createtype4_NF4DIR{}, Objname: "d", Createattrs: mode}}, getfh(), savefh(),
			&nfsv4.NfsArgop4_OP_RENAME{Oprename: nfsv4.Rename4args{Oldname: "d", Newname: "e"}}}),
		encodeArgs("d", 0, []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{Seqid: 1,
			ShareAccess: 3, Owner: owner, Openhow: &nfsv4.Openflag4_OPEN4_CREATE{How: &nfsv4.Createhow4_UNCHECKED4{Createattrs: mode}},
			Claim: &nfsv4.OpenClaim4_CLAIM_NULL{File: "f"}}},
			writeOp(nfsv4.Stateid4{}, 0, []byte("data"), nfsv4.FILE_SYNC4), readOp(nfsv4.Stateid4{}, 0, 10),
			&nfsv4.NfsArgop4_OP_SETATTR{Opsetattr: nfsv4.Setattr4args{ObjAttributes: mode}},
			&nfsv4.NfsArgop4_OP_VERIFY{Opverify: nfsv4.Verify4args{ObjAttributes: mode}},
			&nfsv4.NfsArgop4_OP_LOCKT{Oplockt: nfsv4.Lockt4args{Locktype: nfsv4.WRITE_LT, Length: 1, Owner: owner}}}),
		encodeArgs("e", 0, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_SETCLIENTID{Opsetclientid: nfsv4.Setclientid4args{
			Client: nfsv4.NfsClientId4{Id: []byte("fuzz")}}}, &nfsv4.NfsArgop4_OP_RENEW{}}),
		encodeArgs("f", 1, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_EXCHANGE_ID{OpexchangeId: nfsv4.ExchangeId4args{
			EiaClientowner: nfsv4.ClientOwner4{CoOwnerid: []byte("fuzz")}, EiaStateProtect: &nfsv4.StateProtect4A_SP4_NONE{}}}}),
		encodeArgs("g", 1, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_SEQUENCE{}, putroot()}),
		encodeArgs("h", 2, []nfsv4.NfsArgop4{putroot(), &nfsv4.NfsArgop4_OP_SEEK{}, &nfsv4.NfsArgop4_OP_COPY{}}),
		// The seqid-ordered 4.0 operations and the lock-state ones.
		encodeArgs("i", 0, []nfsv4.NfsArgop4{putroot(), lookup("f"),
			&nfsv4.NfsArgop4_OP_OPEN_DOWNGRADE{OpopenDowngrade: nfsv4.OpenDowngrade4args{Seqid: 2, ShareAccess: 1}},
			&nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Length: 1,
				Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenSeqid: 3, LockOwner: owner}}}},
			&nfsv4.NfsArgop4_OP_LOCKU{Oplocku: nfsv4.Locku4args{Locktype: nfsv4.WRITE_LT, Seqid: 1, Length: 1}},
			closeOp(4, nfsv4.Stateid4{}),
			&nfsv4.NfsArgop4_OP_RELEASE_LOCKOWNER{OpreleaseLockowner: nfsv4.ReleaseLockowner4args{LockOwner: owner}}}),
		encodeArgs("j", 1, []nfsv4.NfsArgop4{&nfsv4.NfsArgop4_OP_BIND_CONN_TO_SESSION{OpbindConnToSession: nfsv4.BindConnToSession4args{
			BctsaDir: nfsv4.CDFC4_FORE_OR_BOTH}}}),
		// RFC 8276's operations, which the decoder reads by hand.
		encodeRawArgs("k", 2, []io.WriterTo{&nfsv4.NfsArgop4_OP_SEQUENCE{}, putroot(),
			setxattrOp(rfcCreate, "a", []byte("value")), getxattrOp("a"), listxattrsOp(0, 4096), removexattrOp("a")}),
	}
}

// FuzzCompound feeds arbitrary bytes to the COMPOUND decoder and
// dispatcher: every input must yield a decodable reply (or GARBAGE_ARGS),
// never a panic.
func FuzzCompound(f *testing.F) {
	var logs lockedBuffer
	e := newEnv(f, Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))}, noExport)
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, ok := e.srv.compound(t.Context(), nil, caller{cred: rootVfsCred}, data, len(data))
		if strings.Contains(logs.String(), "panic") {
			t.Fatalf("an operation panicked:\n%s", logs.String())
		}
		if !ok {
			return
		}
		if _, results := decodeReply(t, out); len(results) > maxOps {
			t.Fatalf("%d results", len(results))
		}
	})
}

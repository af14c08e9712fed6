package nfs4

import (
	"bytes"
	"testing"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// The XDR hot path of every request: decoding a COMPOUND's operations one
// by one (as the server does) and encoding a READ reply.

func BenchmarkDecodeCompoundSequencePutfhRead(b *testing.B) {
	args := encodeArgs("", 1, []nfsv4.NfsArgop4{
		&nfsv4.NfsArgop4_OP_SEQUENCE{Opsequence: nfsv4.Sequence4args{SaSequenceid: 7, SaSlotid: 1, SaHighestSlotid: 63}},
		&nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: make([]byte, 17)}},
		&nfsv4.NfsArgop4_OP_READ{Opread: nfsv4.Read4args{Offset: 1 << 20, Count: 1 << 20}},
	})
	b.SetBytes(int64(len(args)))
	for b.Loop() {
		r := bytes.NewReader(args)
		var a nfsv4.Compound4args
		if _, err := a.ReadFrom(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeReadReply1MiB(b *testing.B) {
	data := make([]byte, 1<<20)
	res := nfsv4.Compound4res{Status: nfsv4.NFS4_OK, Resarray: []nfsv4.NfsResop4{
		&nfsv4.NfsResop4_OP_SEQUENCE{Opsequence: &nfsv4.Sequence4res_NFS4_OK{}},
		&nfsv4.NfsResop4_OP_PUTFH{Opputfh: nfsv4.Putfh4res{Status: nfsv4.NFS4_OK}},
		&nfsv4.NfsResop4_OP_READ{Opread: &nfsv4.Read4res_NFS4_OK{Resok4: nfsv4.Read4resok{Data: data}}},
	}}
	var buf bytes.Buffer
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		buf.Reset()
		if _, err := res.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
	}
}

package nfs4

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/nfsclient"
)

// A client of a server that dies comes back, with the same client owner,
// through another server of the file system (one scope, another server
// owner, as a client sees it in EXCHANGE_ID). Reclaim across servers is
// not offered (identity.go): its reclaims of its open and its lock are
// NFS4ERR_NO_GRACE, the server logs why, and the client opens anew at
// once and locks anew once the dead server's lock is released, no sooner
// than its lease on the dead server could have run out. What it wrote
// through the dead server is there.
func TestAClientOfADeadServerMayNotReclaimThroughAnotherAndLocksAnewAfterTheLease(t *testing.T) {
	f := newPGFS(t)
	var logs lockedBuffer
	a := f.start(t.TempDir(), Options{})
	b := f.start(t.TempDir(), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()

	x := a.client(nfsclient.Config{OwnerID: "x", RenewInterval: 200 * time.Millisecond})
	root, err := x.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fx, err := x.Create(ctx, root, "ledger", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Write(ctx, fx, 0, []byte("synced through a"), nfsv4.FILE_SYNC4); err != nil {
		t.Fatal(err)
	}
	if err := x.Lock(ctx, fx, nfsv4.WRITE_LT, 0, 100); err != nil {
		t.Fatal(err)
	}
	if !a.records(t, b)["4.1:x"] {
		t.Fatalf("a's records: %v; want x's", a.records(t, b))
	}
	sa, _ := x.Session()

	a.crash()
	crashed := time.Now()

	// x comes back through b, the same client owner, and reclaims first,
	// as a client that finds the same server scope does.
	x = b.client(nfsclient.Config{OwnerID: "x", SkipReclaimComplete: true, RenewInterval: 200 * time.Millisecond})
	sb, _ := x.Session()
	if !bytesEqual(sa.ExchangeID.EirServerScope, sb.ExchangeID.EirServerScope) ||
		bytesEqual(sa.ExchangeID.EirServerOwner.SoMajorId, sb.ExchangeID.EirServerOwner.SoMajorId) {
		t.Fatalf("scopes %q and %q, owners %q and %q: want one scope and two owners", sa.ExchangeID.EirServerScope,
			sb.ExchangeID.EirServerScope, sa.ExchangeID.EirServerOwner.SoMajorId, sb.ExchangeID.EirServerOwner.SoMajorId)
	}
	owner := x.NewOwner()
	noGrace := func(err error) bool { return errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_NO_GRACE)) }
	_, err = x.Do(ctx, &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: fx.FH}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_BOTH,
			ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE, Owner: nfsv4.StateOwner4{Clientid: x.ClientID(), Owner: owner.Name},
			Openhow: &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE},
			Claim:   &nfsv4.OpenClaim4_CLAIM_PREVIOUS{DelegateType: nfsv4.OPEN_DELEGATE_NONE}}})
	if !noGrace(err) {
		t.Fatalf("OPEN with CLAIM_PREVIOUS through b of what x held through a: %v; want NFS4ERR_NO_GRACE", err)
	}
	if l := logs.String(); !strings.Contains(l, "reclaim across servers is not offered") ||
		!strings.Contains(l, fmt.Sprintf("records_at=%016x", a.opts.Identity)) {
		t.Errorf("b did not say why it refused the reclaim, naming a:\n%s", l)
	}

	// x opens anew: at once (b has no grace period; x has sent
	// RECLAIM_COMPLETE). Its lock reclaim is refused too.
	if err := x.ReclaimComplete(ctx); err != nil {
		t.Fatal(err)
	}
	fb, err := x.OpenFH(ctx, fx.FH, nfsclient.OpenOptions{})
	if err != nil {
		t.Fatalf("OPEN through b after the refused reclaim: %v", err)
	}
	_, err = x.Do(ctx, &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: fx.FH}},
		&nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Offset: 0, Length: 100, Reclaim: true,
			Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenStateid: fb.Stateid,
				LockOwner: nfsv4.StateOwner4{Clientid: x.ClientID(), Owner: []byte("reclaimer")}}}}})
	if !noGrace(err) {
		t.Fatalf("LOCK with reclaim through b of what x held through a: %v; want NFS4ERR_NO_GRACE", err)
	}

	// The lock anew: refused while a's lock holds, granted once it is
	// released.
	var got time.Duration
	deadline := crashed.Add(3*registryLease + 10*time.Second)
	for {
		err := x.Lock(ctx, fb, nfsv4.WRITE_LT, 0, 100)
		if err == nil {
			got = time.Since(crashed)
			break
		}
		if !errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_DENIED)) {
			t.Fatalf("LOCK through b of the range x held through a: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("x never got its lock back through b (waited %v)", time.Since(crashed))
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
	t.Logf("the client that moved from the dead server locked its range anew %v after the crash (registry lease %v, NFS lease %v)",
		got.Round(time.Millisecond), registryLease, b.srv.lease)
	if got < b.srv.lease {
		t.Errorf("x's lock through b came %v after the crash, before its lease of %v through a could run out", got, b.srv.lease)
	}
	if data, _, err := x.Read(ctx, fb, 0, 100); err != nil || string(data) != "synced through a" {
		t.Fatalf("READ through b of what x synced through a: %q, %v", data, err)
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

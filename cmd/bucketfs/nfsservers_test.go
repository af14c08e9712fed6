package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"

	"bucketfs/internal/nfsclient"
	"bucketfs/internal/pgtest"
	"bucketfs/internal/s3local"
	"bucketfs/internal/s3test"
)

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Issue 23, point 4, with real processes: two `bucketfs serve --meta` on
// one PostgreSQL and one bucket. A client of a server killed with SIGKILL
// keeps its lock against the other server's clients until its own lease
// has run out, and loses it after the server lease (10 s): then a client
// of the other server gets it. What it synced reads back there.
// serveOnPG starts `bucketfs serve --meta url` processes on one bucket.
type serveOnPG struct {
	t      *testing.T
	url    string
	bucket string
	st     *s3local.Server
}

func newServeOnPG(t *testing.T) *serveOnPG {
	url := pgtest.Start(t).NewDatabase(t)
	st, bucket := s3test.NewBucket(t)
	return &serveOnPG{t: t, url: url, bucket: bucket, st: st}
}

// start runs serve on state directory dir and a free port; the process
// is stopped with the test if it still runs.
func (p *serveOnPG) start(dir string) (*exec.Cmd, string) {
	t := p.t
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(binary, "serve", "--state-dir", dir, "--meta", p.url, "--bucket", "s3://"+p.bucket,
		"--endpoint", p.st.Endpoint, "--nfs-listen", addr, "--root-squash=false")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+p.st.AccessKey, "AWS_SECRET_ACCESS_KEY="+p.st.SecretKey,
		"AWS_REGION="+p.st.Region)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("serve on %s:\n%s", addr, log)
		}
	})
	waitFor(t, "serve on "+addr, func() bool { return strings.Contains(log.String(), "over NFS on") })
	return cmd, addr
}

func TestTheLockOfAKilledServesClientGoesToAnotherServeAfterTheLease(t *testing.T) {
	p := newServeOnPG(t)
	procA, addrA := p.start(t.TempDir())
	_, addrB := p.start(t.TempDir())
	ctx := context.Background()
	dial := func(addr string, renew time.Duration) *nfsclient.Client {
		c, err := nfsclient.Dial(ctx, addr, nfsclient.Config{MinorVersion: 1, RenewInterval: renew})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb := dial(addrA, 0), dial(addrB, 500*time.Millisecond)
	sa, _ := ca.Session()
	lease := time.Duration(0)
	if root, err := ca.RootFH(ctx); err == nil {
		if attrs, err := ca.GetAttr(ctx, root, nfsclient.Bitmap(nfsv4.FATTR4_LEASE_TIME)); err == nil {
			lease = time.Duration(attrs.LeaseTime) * time.Second
		}
	}
	if lease != 5*time.Second {
		t.Fatalf("NFS lease of serve --meta: %v; want 5s, half the server lease", lease)
	}
	sb, _ := cb.Session()
	if bytes.Equal(sa.ExchangeID.EirServerOwner.SoMajorId, sb.ExchangeID.EirServerOwner.SoMajorId) ||
		!bytes.Equal(sa.ExchangeID.EirServerScope, sb.ExchangeID.EirServerScope) {
		t.Fatalf("server owners %q, %q and scopes %q, %q: want one scope and two owners",
			sa.ExchangeID.EirServerOwner.SoMajorId, sb.ExchangeID.EirServerOwner.SoMajorId,
			sa.ExchangeID.EirServerScope, sb.ExchangeID.EirServerScope)
	}

	root, err := ca.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fa, err := ca.Create(ctx, root, "ledger", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Write(ctx, fa, 0, []byte("synced through a"), nfsv4.FILE_SYNC4); err != nil {
		t.Fatal(err)
	}
	if err := ca.Lock(ctx, fa, nfsv4.WRITE_LT, 0, 100); err != nil {
		t.Fatal(err)
	}
	fb, err := cb.OpenFH(ctx, fa.FH, nfsclient.OpenOptions{})
	if err != nil {
		t.Fatalf("OPEN through b of a's filehandle: %v", err)
	}
	denied := func(err error) bool { return errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_DENIED)) }
	if err := cb.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); !denied(err) {
		t.Fatalf("LOCK through b of a's client's range: %v; want NFS4ERR_DENIED", err)
	}

	if err := procA.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var got time.Duration
	for {
		err := cb.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10)
		if err == nil {
			got = time.Since(killed)
			break
		}
		if !denied(err) {
			t.Fatalf("LOCK through b after a was killed: %v", err)
		}
		if time.Since(killed) > time.Minute {
			t.Fatal("b's client never got the lock of the killed server's client")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the lock went to b's client %v after a was killed (NFS lease %v, server lease 10s)", got.Round(time.Millisecond), lease)
	if got < lease {
		t.Errorf("the lock went %v after the kill, before the killed server's client's lease of %v ran out", got, lease)
	}
	if data, _, err := cb.Read(ctx, fb, 0, 100); err != nil || string(data) != "synced through a" {
		t.Fatalf("READ through b of what a's client synced: %q, %v", data, err)
	}
}

// A client of a serve killed with SIGKILL and started again on the same
// state directory reclaims its open and lock in the restarted server's
// grace period, while the other server's clients are refused the lock all
// along: before the killed run is known dead, and after.
func TestAClientReclaimsItsLockWhenItsServeIsKilledAndStartedAgain(t *testing.T) {
	p := newServeOnPG(t)
	dirA := t.TempDir()
	procA, addrA := p.start(dirA)
	_, addrB := p.start(t.TempDir())
	ctx := context.Background()
	const owner = "reclaimer"
	ca, err := nfsclient.Dial(ctx, addrA, nfsclient.Config{MinorVersion: 1, OwnerID: owner})
	if err != nil {
		t.Fatal(err)
	}
	root, err := ca.RootFH(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fa, err := ca.Create(ctx, root, "ledger", nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Lock(ctx, fa, nfsv4.WRITE_LT, 0, 100); err != nil {
		t.Fatal(err)
	}
	cb, err := nfsclient.Dial(ctx, addrB, nfsclient.Config{MinorVersion: 1, RenewInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Close() })
	fb, err := cb.OpenFH(ctx, fa.FH, nfsclient.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	denied := func() {
		t.Helper()
		if err := cb.Lock(ctx, fb, nfsv4.WRITE_LT, 50, 10); !errors.Is(err, nfsclient.Status(nfsv4.NFS4ERR_DENIED)) {
			t.Fatalf("LOCK through b of the reclaimer's range: %v; want NFS4ERR_DENIED", err)
		}
	}
	denied()

	if err := procA.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	procA.Wait()
	ca.Close()
	_, addrA = p.start(dirA)
	denied()

	// The client comes back with the same owner and a new client id.
	ca, err = nfsclient.Dial(ctx, addrA, nfsclient.Config{MinorVersion: 1, OwnerID: owner,
		SkipReclaimComplete: true, RenewInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close() })
	res, err := ca.Do(ctx, &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: fa.FH}},
		&nfsv4.NfsArgop4_OP_OPEN{Opopen: nfsv4.Open4args{ShareAccess: nfsv4.OPEN4_SHARE_ACCESS_BOTH,
			ShareDeny: nfsv4.OPEN4_SHARE_DENY_NONE, Owner: nfsv4.StateOwner4{Clientid: ca.ClientID(), Owner: []byte("o")},
			Openhow: &nfsv4.Openflag4_default{Opentype: nfsv4.OPEN4_NOCREATE},
			Claim:   &nfsv4.OpenClaim4_CLAIM_PREVIOUS{DelegateType: nfsv4.OPEN_DELEGATE_NONE}}})
	if err != nil {
		t.Fatalf("OPEN CLAIM_PREVIOUS after the restart: %v", err)
	}
	openSid := res[1].(*nfsv4.NfsResop4_OP_OPEN).Opopen.(*nfsv4.Open4res_NFS4_OK).Resok4.Stateid
	if _, err := ca.Do(ctx, &nfsv4.NfsArgop4_OP_PUTFH{Opputfh: nfsv4.Putfh4args{Object: fa.FH}},
		&nfsv4.NfsArgop4_OP_LOCK{Oplock: nfsv4.Lock4args{Locktype: nfsv4.WRITE_LT, Reclaim: true, Offset: 0, Length: 100,
			Locker: &nfsv4.Locker4_TRUE{OpenOwner: nfsv4.OpenToLockOwner4{OpenStateid: openSid,
				LockOwner: nfsv4.StateOwner4{Clientid: ca.ClientID(), Owner: []byte("l")}}}}}); err != nil {
		t.Fatalf("LOCK reclaim after the restart: %v", err)
	}
	if err := ca.ReclaimComplete(ctx); err != nil {
		t.Fatal(err)
	}
	denied()

	// Through the time in which b finds the killed run dead (its
	// heartbeat unchanged for the 10 s server lease) and removes it from
	// the registry (twice that), the reclaimed lock refuses b's client.
	deadline := time.Now().Add(22 * time.Second)
	for time.Now().Before(deadline) {
		denied()
		time.Sleep(500 * time.Millisecond)
	}
}

package nfsclient

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/buildbarn/go-xdr/pkg/protocols/nfsv4"
)

// Config describes the NFSv4 client a Client sets up.
type Config struct {
	// MinorVersion selects the protocol: 0 is NFSv4.0 (SETCLIENTID, owner
	// seqids, RENEW); 1 and 2 are NFSv4.1 and 4.2 (EXCHANGE_ID, a
	// session, SEQUENCE on every compound). Zero means NFSv4.0.
	MinorVersion uint32
	// Auth is the RPC credential; nil means AUTH_SYS as uid 0, gid 0.
	Auth Auth
	// OwnerID is the client owner string (co_ownerid in EXCHANGE_ID, id
	// in SETCLIENTID) and the prefix of open and lock owner names. Empty
	// means a new unique one, so each Client is a distinct NFS client.
	OwnerID string
	// Verifier is the client's boot verifier; zero means random. A
	// client that "reboots" keeps OwnerID and changes Verifier.
	Verifier [8]byte
	// ExchangeIDFlags are sent in EXCHANGE_ID (4.1+), 0 by default.
	ExchangeIDFlags uint32

	// Fore channel attributes asked for in CREATE_SESSION (4.1+).
	// Zero values take the defaults shown.
	Slots                 uint32 // ca_maxrequests, 16
	MaxRequestSize        uint32 // ca_maxrequestsize, 1 MiB + 64 KiB
	MaxResponseSize       uint32 // ca_maxresponsesize, 1 MiB + 64 KiB
	MaxResponseSizeCached uint32 // ca_maxresponsesize_cached, 64 KiB
	MaxOperations         uint32 // ca_maxoperations, 32

	// SkipReclaimComplete leaves out RECLAIM_COMPLETE after creating the
	// session, for tests of servers that must insist on it.
	SkipReclaimComplete bool
	// RenewInterval, if positive, starts a loop that keeps the lease
	// alive between calls: SEQUENCE on 4.1+, RENEW on 4.0.
	RenewInterval time.Duration

	// MaxFragmentSize and MaxRecordSize are passed to the connection.
	MaxFragmentSize int
	MaxRecordSize   int
	// TLS, if set, runs the connection over RPC-with-TLS (StartTLS).
	TLS *tls.Config
}

// Client is an NFSv4 client on one connection: a client ID, and on 4.1+
// a session whose slot table sequences every compound. Methods may be
// called concurrently.
type Client struct {
	conn     *Conn
	cfg      Config
	clientID uint64
	sess     *session // nil on 4.0
	exchange nfsv4.ExchangeId4resok

	owners atomic.Uint64 // counter for owner names

	stopRenew chan struct{}
	renewDone chan struct{}
	renewMu   sync.Mutex
	renewErr  error // guarded by renewMu
	renewOnce sync.Once
}

// Dial connects to addr and sets up a client as described by cfg.
func Dial(ctx context.Context, addr string, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	conn, err := DialConn(ctx, addr, ConnOptions{Auth: cfg.Auth,
		MaxFragmentSize: cfg.MaxFragmentSize, MaxRecordSize: cfg.MaxRecordSize, TLS: cfg.TLS})
	if err != nil {
		return nil, err
	}
	c, err := NewClient(ctx, conn, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// NewClient sets up an NFSv4 client over conn: SETCLIENTID and
// SETCLIENTID_CONFIRM on 4.0; EXCHANGE_ID, CREATE_SESSION and
// RECLAIM_COMPLETE on 4.1+. The client owns conn from then on. Calls
// on conn use conn's credential, not cfg.Auth.
func NewClient(ctx context.Context, conn *Conn, cfg Config) (*Client, error) {
	c := &Client{conn: conn, cfg: cfg.withDefaults()}
	if c.cfg.MinorVersion == 0 {
		if err := c.setClientID(ctx); err != nil {
			return nil, err
		}
	} else {
		if err := c.exchangeID(ctx); err != nil {
			return nil, err
		}
		if err := c.createSession(ctx); err != nil {
			return nil, err
		}
		if !c.cfg.SkipReclaimComplete {
			if err := c.ReclaimComplete(ctx); err != nil {
				return nil, err
			}
		}
	}
	if c.cfg.RenewInterval > 0 {
		c.stopRenew = make(chan struct{})
		c.renewDone = make(chan struct{})
		go c.renewLoop(c.cfg.RenewInterval)
	}
	return c, nil
}

func (cfg Config) withDefaults() Config {
	if cfg.Auth == nil {
		host, _ := os.Hostname()
		cfg.Auth = AuthSys{MachineName: host}
	}
	if cfg.OwnerID == "" {
		var b [8]byte
		rand.Read(b[:])
		host, _ := os.Hostname()
		cfg.OwnerID = fmt.Sprintf("bucketfs-nfsclient/%s/%d/%x", host, os.Getpid(), b)
	}
	if cfg.Verifier == ([8]byte{}) {
		rand.Read(cfg.Verifier[:])
	}
	setDefault := func(v *uint32, d uint32) {
		if *v == 0 {
			*v = d
		}
	}
	setDefault(&cfg.Slots, 16)
	setDefault(&cfg.MaxRequestSize, 1<<20+64<<10)
	setDefault(&cfg.MaxResponseSize, 1<<20+64<<10)
	setDefault(&cfg.MaxResponseSizeCached, 64<<10)
	setDefault(&cfg.MaxOperations, 32)
	return cfg
}

// Conn is the client's RPC connection, for raw calls beside the client.
func (c *Client) Conn() *Conn { return c.conn }

// MinorVersion is the NFSv4 minor version the client speaks.
func (c *Client) MinorVersion() uint32 { return c.cfg.MinorVersion }

// ClientID is the client ID from EXCHANGE_ID or SETCLIENTID.
func (c *Client) ClientID() uint64 { return c.clientID }

// Compound sends a COMPOUND exactly as given (no SEQUENCE added, status
// not checked): the raw form for tests.
func (c *Client) Compound(ctx context.Context, minorVersion uint32, tag string, ops []nfsv4.NfsArgop4) (*nfsv4.Compound4res, error) {
	return c.conn.Compound(ctx, minorVersion, tag, ops)
}

// DoCompound sends ops as one COMPOUND in the client's minor version. On
// 4.1+ it first takes a slot and prepends SEQUENCE, so the reply's first
// result is SEQUENCE's. The reply is returned as is; the error is only
// for failures to get one.
func (c *Client) DoCompound(ctx context.Context, ops ...nfsv4.NfsArgop4) (*nfsv4.Compound4res, error) {
	if c.sess == nil {
		return c.conn.Compound(ctx, c.cfg.MinorVersion, tagFromContext(ctx), ops)
	}
	return c.sess.call(ctx, c, -1, false, ops)
}

// Do is DoCompound that checks the reply: a status other than NFS4_OK
// becomes a *StatusError naming the failing operation, and the results
// are checked to match ops one for one. The SEQUENCE result is left out.
// On error the results of the operations that ran are still returned.
func (c *Client) Do(ctx context.Context, ops ...nfsv4.NfsArgop4) ([]nfsv4.NfsResop4, error) {
	res, err := c.DoCompound(ctx, ops...)
	if err != nil {
		return nil, err
	}
	return checkCompound(res, ops, c.sess != nil)
}

// checkCompound turns a compound reply into results without SEQUENCE (if
// sequenced, the request had a SEQUENCE before ops), or an error.
func checkCompound(res *nfsv4.Compound4res, ops []nfsv4.NfsArgop4, sequenced bool) ([]nfsv4.NfsResop4, error) {
	results := res.Resarray
	if sequenced {
		if len(results) == 0 {
			return nil, opError(res)
		}
		if results[0].GetResop() != nfsv4.OP_SEQUENCE {
			return nil, fmt.Errorf("nfsclient: first result is %s, want OP_SEQUENCE", opName(results[0].GetResop()))
		}
		if len(results) == 1 && res.Status != nfsv4.NFS4_OK {
			return nil, opError(res)
		}
		results = results[1:]
	}
	if len(results) > len(ops) {
		return nil, fmt.Errorf("nfsclient: %d results for %d operations", len(results), len(ops))
	}
	for i, r := range results {
		if r.GetResop() != ops[i].GetArgop() {
			return nil, fmt.Errorf("nfsclient: result %d is %s for %s", i, opName(r.GetResop()), opName(ops[i].GetArgop()))
		}
	}
	if res.Status != nfsv4.NFS4_OK {
		return results, opError(res)
	}
	if len(results) != len(ops) {
		return results, fmt.Errorf("nfsclient: NFS4_OK with %d results for %d operations", len(results), len(ops))
	}
	return results, nil
}

// Renew keeps the lease alive with one call: a SEQUENCE-only compound on
// 4.1+, RENEW on 4.0.
func (c *Client) Renew(ctx context.Context) error {
	if c.sess == nil {
		_, err := c.Do(ctx, &nfsv4.NfsArgop4_OP_RENEW{Oprenew: nfsv4.Renew4args{Clientid: c.clientID}})
		return err
	}
	_, err := c.Do(ctx)
	return err
}

// RenewErr is the error of the renew loop's latest attempt, nil if it
// succeeded or there is no loop.
func (c *Client) RenewErr() error {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	return c.renewErr
}

func (c *Client) renewLoop(every time.Duration) {
	defer close(c.renewDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stopRenew:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := c.Renew(ctx)
		cancel()
		c.renewMu.Lock()
		c.renewErr = err
		c.renewMu.Unlock()
	}
}

// Close stops the renew loop and closes the connection without telling
// the server anything, like a client that crashed: its state lives on
// until the lease expires. Use Shutdown for an orderly goodbye.
func (c *Client) Close() error {
	c.stopRenewLoop()
	return c.conn.Close()
}

func (c *Client) stopRenewLoop() {
	c.renewOnce.Do(func() {
		if c.stopRenew != nil {
			close(c.stopRenew)
			<-c.renewDone
		}
	})
}

// Shutdown ends the client in order, as an unmount does: on 4.1+
// DESTROY_SESSION then DESTROY_CLIENTID; then it closes the connection.
// Open files and locks should be closed first, or DESTROY_CLIENTID fails
// with NFS4ERR_CLIENTID_BUSY.
func (c *Client) Shutdown(ctx context.Context) error {
	c.stopRenewLoop()
	var errs []error
	if c.sess != nil {
		errs = append(errs, c.DestroySession(ctx))
		errs = append(errs, c.DestroyClientID(ctx))
	}
	if err := c.conn.Close(); err != nil && !errors.Is(err, ErrClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// NewOwner returns a new open or lock owner of this client. Each OpenFile
// gets its own owners unless OpenOptions.Owner says otherwise.
func (c *Client) NewOwner() *Owner {
	n := c.owners.Add(1)
	return &Owner{Name: []byte(c.cfg.OwnerID + "/" + strconv.FormatUint(n, 10))}
}

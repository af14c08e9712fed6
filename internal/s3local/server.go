package s3local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/s3api"
	"github.com/versity/versitygw/s3api/middlewares"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3event"
)

const (
	defaultBucket = "bucketfs"
	defaultRegion = "us-east-1"
	defaultListen = "127.0.0.1:0"
	// listenPortFile, in the store's directory, keeps the port picked for
	// a zero port (Config.Listen).
	listenPortFile = "listen-port"

	// maxConnections and maxRequests bound the connections and in-flight
	// requests the store serves; requests beyond the limit get 503 SlowDown,
	// which clients retry.
	maxConnections = 4096
	maxRequests    = 1024

	// maxCopySize is S3's limit on the source of CopyObject and the range
	// of UploadPartCopy.
	maxCopySize = 5 << 30

	// bindAttempts bounds how often Start retries when the free port it
	// picked was taken by someone else before the server could bind it.
	bindAttempts = 10
)

// running is the one piece of package-level mutable state: it guards the
// process working directory. versitygw's posix backend chdirs to its data
// directory and resolves object paths relative to the working directory, so a
// second store in the same process would silently serve the first one's files
// (or the other way round). Start takes the guard and Close releases it.
var running atomic.Bool

// ErrAlreadyRunning is returned by Start while another embedded store runs in
// the same process.
var ErrAlreadyRunning = errors.New("s3local: an embedded store is already running in this process " +
	"(versitygw's posix backend changes the process working directory, so only one can run at a time; Close it first)")

// Config describes one embedded store.
type Config struct {
	// Dir is the state directory: data under Dir/data, old versions under
	// Dir/versions, credentials in Dir/credentials.json. Relative paths are
	// resolved against the working directory at the time Start is called.
	Dir string
	// Listen is the TCP address to serve on; a zero port picks a free one
	// the first time and the same one at every later start on Dir (kept
	// in Dir/listen-port), so clients configured with the endpoint keep
	// working; only if that port is taken meanwhile is another picked
	// (Server.PortMoved). Default "127.0.0.1:0".
	Listen string
	// Bucket is created if missing, with versioning enabled. Default
	// "bucketfs".
	Bucket string
	// Region the store answers for. Default "us-east-1".
	Region string
	// OnEvent, if set, is called for every object event. See the package
	// documentation for when and how.
	OnEvent func(Event)
}

// Event is one object event as versitygw reports it.
type Event struct {
	Name      string // e.g. "s3:ObjectCreated:Put", "s3:ObjectRemoved:Delete"
	Bucket    string
	Key       string
	Size      int64  // object size for creations, 0 for removals
	ETag      string // without quotes; empty for removals
	VersionID string // the new version, or the delete marker's version id
}

// Server is a running embedded store. Its exported fields are what a client
// needs to reach it; they do not change while it runs.
type Server struct {
	Endpoint  string // http://HOST:PORT
	Region    string
	AccessKey string
	SecretKey string
	Bucket    string
	Dir       string // absolute state directory
	// PortMoved is the port kept from an earlier start that was taken
	// this time, so the store serves on another ("" when it did not move).
	PortMoved string

	api     *s3api.S3ApiServer
	backend *posix.Posix
	listing *awsListing // the backend as the API serves it
	served  chan error  // receives ServeMultiPort's result once it returns
	prevWD  string      // working directory before Start, restored by Close

	// adminHTTP carries the server's own administrative calls (client).
	// Close drops its idle connections before shutting the API down:
	// fasthttp's graceful shutdown waits its full 10 s for a connection
	// that was opened but never carried a request, and an http.Transport
	// leaves such connections behind when a dial finishes after the
	// request it was for went out on another connection.
	adminHTTP *http.Transport

	closeOnce sync.Once
	closeErr  error
}

// Start starts an embedded store and returns once it answers requests and
// its bucket exists with versioning enabled. It fails with ErrAlreadyRunning
// while another store runs in this process.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("s3local: start: Config.Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("s3local: start: resolve dir %q: %w", cfg.Dir, err)
	}
	if cfg.Listen == "" {
		cfg.Listen = defaultListen
	}
	if cfg.Bucket == "" {
		cfg.Bucket = defaultBucket
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	dataDir := filepath.Join(dir, "data")
	versionsDir := filepath.Join(dir, "versions")
	for _, d := range []string{dir, dataDir, versionsDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("s3local: start: create %s: %w", d, err)
		}
	}
	if err := dropUnnamedUploads(dataDir); err != nil {
		return nil, fmt.Errorf("s3local: start: remove multipart uploads a crash left half made: %w", err)
	}

	creds, err := loadOrCreateCredentials(filepath.Join(dir, credentialsFile))
	if err != nil {
		return nil, err
	}

	if !running.CompareAndSwap(false, true) {
		return nil, ErrAlreadyRunning
	}
	if err := markRunning(dir, dataDir); err != nil {
		running.Store(false)
		return nil, err
	}
	s, err := start(ctx, cfg, dir, creds)
	if err != nil {
		running.Store(false)
		return nil, err
	}
	return s, nil
}

// markRunning writes runningMark in dir, first removing what puts cut
// short left in dataDir if the mark is there already: the last run did not
// close.
func markRunning(dir, dataDir string) error {
	mark := filepath.Join(dir, runningMark)
	if _, err := os.Stat(mark); err == nil {
		if err := dropTempNames(dataDir); err != nil {
			return fmt.Errorf("s3local: start: remove the temporary names of puts a crash cut short: %w", err)
		}
	}
	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		return fmt.Errorf("s3local: start: %w", err)
	}
	return nil
}

// start does the work of Start once the process-wide guard is held.
func start(ctx context.Context, cfg Config, dir string, creds rootCredentials) (_ *Server, err error) {
	prevWD, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("s3local: start: get working directory: %w", err)
	}
	be, err := quietly(func() (*posix.Posix, error) {
		return posix.New(filepath.Join(dir, "data"), meta.XattrMeta{}, posix.PosixOpts{
			VersioningDir: filepath.Join(dir, "versions"),
			// Documented to default to 5 GiB, but only versitygw's CLI applies
			// that default: left at zero, every CopyObject and UploadPartCopy
			// fails with "copy source is larger than the maximum allowable size".
			CopyObjectThreshold: maxCopySize,
		})
	})
	if err != nil {
		_ = os.Chdir(prevWD)
		return nil, fmt.Errorf("s3local: start: open posix backend in %s: %w", dir, err)
	}
	s := &Server{
		Region:    cfg.Region,
		AccessKey: creds.AccessKey,
		SecretKey: creds.SecretKey,
		Bucket:    cfg.Bucket,
		Dir:       dir,
		backend:   be,
		prevWD:    prevWD,
		adminHTTP: http.DefaultTransport.(*http.Transport).Clone(),
	}
	defer func() {
		if err != nil {
			s.backend.Shutdown()
			_ = os.Chdir(prevWD)
		}
	}()

	if err := s.serve(ctx, cfg); err != nil {
		return nil, err
	}
	if err := s.CreateBucket(ctx, cfg.Bucket, true); err != nil {
		_ = s.stopServing()
		return nil, err
	}
	return s, nil
}

// serve binds cfg.Listen and serves on it, retrying with a fresh port when a
// picked free port is taken before the server binds it.
func (s *Server) serve(ctx context.Context, cfg Config) error {
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return fmt.Errorf("s3local: start: listen address %q: %w", cfg.Listen, err)
	}
	pickPort := port == "0" || port == ""
	portFile := filepath.Join(s.Dir, listenPortFile)
	kept := ""
	if pickPort {
		if b, err := os.ReadFile(portFile); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && n < 65536 {
				kept = strconv.Itoa(n)
			}
		}
	}
	var lastErr error
	for attempt := 0; attempt < bindAttempts; attempt++ {
		p := port
		switch {
		case pickPort && attempt == 0 && kept != "":
			p = kept
		case pickPort:
			if p, err = freePort(host); err != nil {
				return fmt.Errorf("s3local: start: pick a free port on %q: %w", host, err)
			}
		}
		addr := net.JoinHostPort(host, p)
		lastErr = s.serveOn(ctx, cfg, addr)
		if lastErr == nil {
			s.Endpoint = "http://" + net.JoinHostPort(dialHost(host), p)
			if pickPort {
				if kept != "" && p != kept {
					s.PortMoved = kept
				}
				if err := os.WriteFile(portFile, []byte(p+"\n"), 0o600); err != nil {
					return fmt.Errorf("s3local: start: remember the port: %w", err)
				}
			}
			return nil
		}
		var be *bindError
		if !pickPort || !errors.As(lastErr, &be) {
			return lastErr
		}
	}
	return fmt.Errorf("s3local: start: no free port on %q after %d attempts: %w", host, bindAttempts, lastErr)
}

// bindError is a failure to bind the listen address (as opposed to a
// failure while serving). Its text names the address once, on one line:
// versitygw's own error names it at each level it passes through.
type bindError struct {
	addr string
	err  error
}

func (e *bindError) Error() string {
	if errors.Is(e.err, syscall.EADDRINUSE) {
		return e.addr + " is in use by another program"
	}
	reason := e.err.Error()
	if op := (*net.OpError)(nil); errors.As(e.err, &op) {
		reason = op.Err.Error() // without "listen tcp ADDR: "
	}
	return "cannot listen on " + e.addr + ": " + reason
}

func (e *bindError) Unwrap() error { return e.err }

// serveOn starts the S3 API on addr and waits until it listens.
func (s *Server) serveOn(ctx context.Context, cfg Config, addr string) error {
	listening := make(chan struct{})
	var once sync.Once
	opts := []s3api.Option{
		s3api.WithQuiet(),
		s3api.WithKeepAlive(),
		// Without this option versitygw allows zero in-flight requests and
		// answers everything with 503 SlowDown.
		s3api.WithConcurrencyLimiter(maxConnections, maxRequests),
		s3api.WithOnListen(func() { once.Do(func() { close(listening) }) }),
		s3api.WithMiddleware("/", keepCopyConditions),
	}
	var events s3event.S3EventSender // a true nil interface when unused
	if cfg.OnEvent != nil {
		events = &eventSender{onEvent: cfg.OnEvent}
	}
	iam := auth.NewIAMServiceSingle(auth.Account{
		Access: s.AccessKey,
		Secret: s.SecretKey,
		Role:   auth.RoleAdmin,
	})
	root := middlewares.RootUserConfig{Access: s.AccessKey, Secret: s.SecretKey}
	s.listing = &awsListing{Backend: newSerialBackend(s.backend), dataDir: filepath.Join(s.Dir, "data")}
	api, err := s3api.New(s.listing, root, cfg.Region, iam, nil, nil, events, nil, opts...)
	if err != nil {
		return fmt.Errorf("s3local: start: create S3 API server: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- api.ServeMultiPort([]string{addr}) }()

	select {
	case <-listening:
		s.api = api
		s.served = served
		return nil
	case err := <-served:
		if err == nil {
			err = errors.New("server stopped before listening")
		}
		return &bindError{addr: addr, err: err}
	case <-ctx.Done():
		// Shutting fiber down before it serves would race with its start,
		// so let the (millisecond) start finish first.
		select {
		case <-listening:
			_ = api.ShutDown()
			<-served
		case <-served:
		}
		return fmt.Errorf("s3local: start: serve on %s: %w", addr, ctx.Err())
	}
}

// quietly runs open with os.Stdout pointing nowhere: versitygw's posix
// backend prints a line there when it opens a versioned store, and
// bucketfs's standard output is the user's terminal (and what a mount
// helper's caller reads). Start runs one store per process at a time (the
// backend changes the working directory too), and nothing else of bucketfs
// writes to standard output while a store starts.
func quietly[T any](open func() (T, error)) (T, error) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return open()
	}
	defer null.Close()
	stdout := os.Stdout
	os.Stdout = null
	defer func() { os.Stdout = stdout }()
	return open()
}

// freePort asks the kernel for a free TCP port on host and releases it.
func freePort(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return "", err
	}
	return strconv.Itoa(port), nil
}

// dialHost is the host a client should dial to reach a server listening on
// host: wildcard addresses become the matching loopback address.
func dialHost(host string) string {
	switch host {
	case "", "0.0.0.0":
		return "127.0.0.1"
	case "::", "[::]":
		return "::1"
	}
	return host
}

// Close shuts down the server and the backend, releases the one-per-process
// guard and restores the working directory the process had before Start.
// Close is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		errs := []error{s.stopServing()}
		s.backend.Shutdown()
		if err := os.Chdir(s.prevWD); err != nil {
			errs = append(errs, fmt.Errorf("s3local: close: restore working directory %s: %w", s.prevWD, err))
		}
		if err := os.Remove(filepath.Join(s.Dir, runningMark)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("s3local: close: %w", err))
		}
		running.Store(false)
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// stopServing shuts the S3 API down and waits for its serve loop to return.
func (s *Server) stopServing() error {
	if s.api == nil {
		return nil
	}
	s.adminHTTP.CloseIdleConnections()
	err := s.api.ShutDown()
	select {
	case <-s.served:
	case <-time.After(15 * time.Second):
		// ShutDown waits at most 10 s for open requests; this only
		// guards against a serve loop that never returns.
		err = errors.Join(err, errors.New("serve loop did not return"))
	}
	s.api = nil
	if err != nil {
		return fmt.Errorf("s3local: close: shut down S3 API on %s: %w", s.Endpoint, err)
	}
	return nil
}

// Head answers a HEAD of key in bucket (the given version, or the current
// one) in process, from the backend as the API serves it (under the key's
// lock, see serialBackend), without HTTP, signing or the API's
// checks: for bucketfs's own reads of the embedded store it is the same
// answer at a fraction of the cost (an import HEADs every object it
// lists). found is false where a HEAD over HTTP gets 404: no current
// object, or no such version. Any other failure is an error, and the
// caller asks over HTTP, which says what is wrong in the API's words. The
// output's fields are as the SDK reads them from a HEAD response: the
// modification time to the second (Last-Modified carries no more).
func (s *Server) Head(ctx context.Context, bucket, key, versionID string) (out *s3.HeadObjectOutput, found bool, err error) {
	in := &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
	if versionID != "" {
		in.VersionId = aws.String(versionID)
	}
	out, err = s.listing.HeadObject(ctx, in)
	var apiErr s3err.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.HTTPStatusCode == http.StatusNotFound && apiErr.Code != "NoSuchBucket":
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case out == nil:
		return nil, false, errors.New("s3local: head: no answer")
	}
	if out.LastModified != nil {
		out.LastModified = aws.Time(out.LastModified.UTC().Truncate(time.Second))
	}
	return out, true, nil
}

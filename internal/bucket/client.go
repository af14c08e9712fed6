package bucket

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
)

const (
	defaultRegion    = "us-east-1"
	defaultOpTimeout = 30 * time.Second
	// unboundedAttempts stands for "as many attempts as the operation
	// bound allows": the bound, not a count, ends an operation against a
	// store that is away, so that its time is the one documented.
	unboundedAttempts = 1 << 30

	// Full-jitter exponential backoff between attempts (see fullJitter).
	backoffBase = 100 * time.Millisecond
	backoffCap  = 5 * time.Second

	// maxIdleConnsPerHost is generous because reads are many parallel ranged
	// GETs against one endpoint.
	maxIdleConnsPerHost = 64
)

// Config says which bucket to use and how to reach it.
type Config struct {
	Bucket string
	// Prefix is "" or a key prefix all keys live under; it is normalised to
	// have no leading and exactly one trailing slash.
	Prefix string
	// Endpoint is the store's URL. If empty, AWS_ENDPOINT_URL or the
	// standard AWS resolution applies.
	Endpoint string
	// Region defaults to the AWS environment and config files, else
	// "us-east-1".
	Region string
	// AccessKey and SecretKey, if set, are used as static credentials;
	// otherwise the standard AWS credential chain applies.
	AccessKey, SecretKey string
	// PathStyle addresses buckets as http://host/bucket/key. It is forced on
	// whenever an endpoint is configured (here or in the environment),
	// since non-AWS stores rarely support virtual-hosted buckets.
	PathStyle bool
	// OpTimeout bounds one logical operation, including retries, while no
	// data moves (default 30 s). After it the operation fails with an error
	// wrapping ErrUnavailable.
	OpTimeout time.Duration
	// MaxAttempts caps the attempts per request; 0 (the default) leaves
	// only OpTimeout to end the retries.
	MaxAttempts int
	// ReadOnly makes every write (put, copy, delete, multipart upload and
	// its abort) fail with ErrReadOnly before it reaches the store.
	ReadOnly bool
	// TrustConditionalWrites takes a conditional write's 2xx as proof
	// that its condition held, on any store. By default only AWS S3 is
	// trusted so (see confirmWrite): other stores have acknowledged a
	// conditional write beside another write of the key (MinIO, under a
	// race), and each of their conditional writes is confirmed from the
	// key's version list, at the cost of one listing request.
	TrustConditionalWrites bool
	// Logger gets the word that the store does not answer the first
	// contact (CheckVersioning) while it is still retried; nil means
	// slog.Default().
	Logger *slog.Logger
	// LocalHead, if set, answers HEADs in process, without HTTP: the
	// embedded store's (s3local.Server.Head), for the bucket Bucket names.
	// It returns the output a HEAD over HTTP returns, found false for a
	// key with no current object (or no such version), or an error for
	// anything else, which the HEAD over HTTP then answers.
	LocalHead func(ctx context.Context, bucket, key, versionID string) (out *s3.HeadObjectOutput, found bool, err error)
}

// Client reads and writes objects in one bucket under one prefix. It is safe
// for concurrent use.
type Client struct {
	s3          *s3.Client
	bucket      string
	prefix      string
	opTimeout   time.Duration
	maxAttempts int
	endpoint    string // the store's URL, from any source; "" for AWS's own
	accessKey   string // as configured ("" for the credential chain's)
	readOnly    bool
	log         *slog.Logger
	stats       counters
	// headBeforeWrite is set when the store ignores conditional writes.
	headBeforeWrite atomic.Bool
	// confirmWrites says that conditional writes are confirmed from the
	// key's version list (see confirmWrite); fixed at New.
	confirmWrites bool
	// conditionalDeletes is set when the store honours If-Match on
	// DeleteObject (ProbeConditionalWrites finds out).
	conditionalDeletes atomic.Bool

	conns conns // every connection the client's transports made, for Close

	localHead func(ctx context.Context, bucket, key, versionID string) (*s3.HeadObjectOutput, bool, error)
}

// Close closes the client's connections. Some servers (versitygw's
// fasthttp) wait on shutdown for connections that never carried a request
// or sit idle. Call it once no request is under way.
func (c *Client) Close() { c.conns.closeAll() }

// conns tracks the connections a client's transports dial. The transport
// the client configures is not the one that dials: the SDK clones it
// (awshttp.BuildableClient), so closing the idle connections of the one
// configured closed nothing. The dial function, which clones share, sees
// every connection.
type conns struct {
	mu   sync.Mutex
	open map[*trackedConn]struct{}
}

// dial wraps a transport's dial function so that its connections are
// tracked.
func (cs *conns) dial(inner func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := inner(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: conn, cs: cs}
		cs.mu.Lock()
		if cs.open == nil {
			cs.open = map[*trackedConn]struct{}{}
		}
		cs.open[tc] = struct{}{}
		cs.mu.Unlock()
		return tc, nil
	}
}

func (cs *conns) closeAll() {
	cs.mu.Lock()
	open := cs.open
	cs.open = nil
	cs.mu.Unlock()
	for tc := range open {
		tc.Conn.Close()
	}
}

// trackedConn leaves its conns when closed.
type trackedConn struct {
	net.Conn
	cs   *conns
	once sync.Once
}

func (tc *trackedConn) Close() error {
	tc.once.Do(func() {
		tc.cs.mu.Lock()
		delete(tc.cs.open, tc)
		tc.cs.mu.Unlock()
	})
	return tc.Conn.Close()
}

// New makes a Client. It does not contact the store; use CheckVersioning
// to find out whether the bucket is usable.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("bucket: new client: no bucket name")
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, fmt.Errorf("bucket: new client for %q: access key and secret key must be given together", cfg.Bucket)
	}
	c := &Client{
		localHead:   cfg.LocalHead,
		bucket:      cfg.Bucket,
		prefix:      normalisePrefix(cfg.Prefix),
		opTimeout:   cfg.OpTimeout,
		maxAttempts: cfg.MaxAttempts,
		accessKey:   cfg.AccessKey,
		readOnly:    cfg.ReadOnly,
		log:         cfg.Logger,
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.opTimeout <= 0 {
		c.opTimeout = defaultOpTimeout
	}
	if c.maxAttempts <= 0 {
		c.maxAttempts = unboundedAttempts
	}

	// A BuildableClient (rather than a plain http.Client) lets the config
	// loader apply AWS_CA_BUNDLE and friends to the transport.
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConns = 4 * maxIdleConnsPerHost
		tr.MaxIdleConnsPerHost = maxIdleConnsPerHost
		dial := tr.DialContext
		if dial == nil {
			dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		tr.DialContext = c.conns.dial(dial)
	})

	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		// The SDK's own log lines (IMDS fallbacks and the like) would
		// reach the user's terminal beside ours; errors say what matters.
		config.WithLogger(logging.Nop{}),
		config.WithAPIOptions([]func(*middleware.Stack) error{c.stats.countRequests}),
		config.WithRetryer(func() aws.Retryer {
			return &countingRetryer{
				RetryerV2: retry.NewStandard(func(o *retry.StandardOptions) {
					o.MaxAttempts = c.maxAttempts
					o.MaxBackoff = backoffCap
					o.Backoff = retry.BackoffDelayerFunc(fullJitter)
					o.RateLimiter = ratelimit.None
				}),
				stats: &c.stats,
			}
		}),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("bucket: new client for %q: load AWS config: %w", cfg.Bucket, err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = defaultRegion
	}
	c.s3 = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		// o.BaseEndpoint holds what the environment and config files
		// said (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_S3, endpoint_url),
		// resolved before these options run.
		c.endpoint = aws.ToString(o.BaseEndpoint)
		o.UsePathStyle = cfg.PathStyle || c.endpoint != ""
		c.confirmWrites = !cfg.TrustConditionalWrites && !isAWS(c.endpoint)
	})
	if c.endpoint != "" {
		if err := checkEndpoint(c.endpoint, endpointSource(cfg)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// fullJitter is the backoff before retry number attempt (1 for the first
// retry): a random delay below min(backoffCap, backoffBase * 2^(attempt-1)).
func fullJitter(attempt int, _ error) (time.Duration, error) {
	ceiling := backoffCap
	if attempt >= 1 && attempt < 16 {
		ceiling = min(backoffCap, backoffBase<<(attempt-1))
	}
	return rand.N(ceiling), nil
}

// normalisePrefix returns p without leading slashes and with one trailing
// slash, or "" for an empty prefix.
func normalisePrefix(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return ""
	}
	return strings.TrimRight(p, "/") + "/"
}

// ParseURL splits "s3://NAME[/PREFIX]" into a bucket name and a normalised
// prefix ("" or ending in "/").
func ParseURL(s string) (bucket, prefix string, err error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return "", "", fmt.Errorf("bucket: parse URL %q: want s3://BUCKET[/PREFIX]", s)
	}
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("bucket: parse URL %q: no bucket name", s)
	}
	if strings.ContainsAny(bucket, "?#:@ ") {
		return "", "", fmt.Errorf("bucket: parse URL %q: %q is not a bucket name", s, bucket)
	}
	return bucket, normalisePrefix(prefix), nil
}

// String returns the client's root as s3://bucket/prefix.
// Name is the bucket's name.
func (c *Client) Name() string { return c.bucket }

// Prefix is the key prefix the file system lives under ("" or ending in
// "/").
func (c *Client) Prefix() string { return c.prefix }

func (c *Client) String() string { return "s3://" + c.bucket + "/" + c.prefix }

// CheckVersioning returns nil if versioning is enabled on the bucket, and an
// error wrapping ErrNotVersioned that says how to enable it otherwise. It is
// the first contact with the store: while the store does not answer it
// logs, once, that it is retrying and where (firstContact), and its error
// says in one line what is wrong (explain).
func (c *Client) CheckVersioning(ctx context.Context) error {
	op := c.startOp(ctx)
	defer op.done()
	watch := c.watchFirstContact()
	out, err := c.s3.GetBucketVersioning(op.ctx, &s3.GetBucketVersioningInput{Bucket: &c.bucket}, func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, watch.attempts)
	})
	watch.stop()
	if err != nil {
		return c.explain(c.fail(op, "check versioning of", "", err))
	}
	if out.Status == types.BucketVersioningStatusEnabled {
		return nil
	}
	status := string(out.Status)
	if status == "" {
		status = "never enabled"
	}
	return fmt.Errorf("bucket: s3://%s: %w (status: %s); bucketfs reads pinned versions and needs it on: "+
		"aws s3api put-bucket-versioning --bucket %s --versioning-configuration Status=Enabled",
		c.bucket, ErrNotVersioned, status, c.bucket)
}

// key returns the full object key for a key relative to the prefix.
func (c *Client) key(rel string) *string { return aws.String(c.prefix + rel) }

// rel returns a full key relative to the prefix.
func (c *Client) rel(full string) string { return strings.TrimPrefix(full, c.prefix) }

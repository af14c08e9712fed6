// Command bucketfs serves an S3 bucket as a POSIX file system.
//
//	bucketfs mount [flags] MOUNTPOINT    FUSE mount, in the foreground
//	bucketfs serve [flags]               NFSv4.1/4.0 server, in the foreground
//	bucketfs status [--state-dir DIR]    where sync stands
//	bucketfs flush [--state-dir DIR] [PATH]  export now
//	bucketfs version
//
// With no --bucket, bucketfs runs its embedded S3 store under the state
// directory and writes the store's address and credentials to
// STATE_DIR/s3.env.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/accesspoint"
	"bucketfs/internal/bucket"
	"bucketfs/internal/engine"
	bfuse "bucketfs/internal/frontend/fuse"
)

const version = "0.1.0-dev"

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the flags were printed
		}
		fmt.Fprintln(os.Stderr, "bucketfs:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errors.New("no command given")
	}
	switch args[0] {
	case "mount":
		return mount(args[1:], stdout, stderr)
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "status":
		return status(args[1:], stdout, stderr)
	case "flush":
		return flush(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "bucketfs", version)
		return nil
	case "help", "-h", "--help":
		usage(stdout)
		return nil
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", args[0])
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  bucketfs mount [flags] MOUNTPOINT   mount a bucket (default: the embedded store) with FUSE
  bucketfs serve [flags]              serve it over NFSv4.1 and 4.0 (--nfs-listen, default 127.0.0.1:2049)
  bucketfs status [--state-dir DIR] [--json]
                                      pending exports, import lag, conflicts, tier use, S3 requests
  bucketfs flush [--state-dir DIR] [PATH]
                                      export PATH (or everything pending) now, without the delay
  bucketfs version
run "bucketfs mount -h" for the flags
`)
}

// options are the flags mount (and later serve) share.
type options struct {
	stateDir, bucketURL, endpoint                   string
	exportDelay, pollInterval, revalTTL, checkpoint time.Duration
	importThreshold, directRead, tierCap            byteSize
	s3Listen, logLevel                              string
	metricsListen                                   string
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "bucketfs")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "bucketfs-state"
	}
	return filepath.Join(home, ".local", "share", "bucketfs")
}

func (o *options) register(fs *flag.FlagSet) {
	o.importThreshold, o.directRead = 128<<10, 1<<20
	fs.StringVar(&o.stateDir, "state-dir", defaultStateDir(), "state directory (metadata, tier, embedded store)")
	fs.StringVar(&o.bucketURL, "bucket", "", "bucket as s3://NAME[/PREFIX]; empty runs the embedded store")
	fs.StringVar(&o.endpoint, "endpoint", "", "S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
	fs.DurationVar(&o.exportDelay, "export-delay", 60*time.Second, "quiet period before a changed file is exported")
	fs.Var(&o.importThreshold, "import-threshold", "files smaller than this are copied into the tier on first access")
	fs.Var(&o.directRead, "direct-read-size", "files at least this large are streamed from the bucket")
	fs.Var(&o.tierCap, "tier-capacity", "tier size limit; clean data beyond it is evicted (0: no limit)")
	fs.StringVar(&o.s3Listen, "s3-listen", "127.0.0.1:0", "address of the embedded S3 store")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.pollInterval, "poll-interval", 10*time.Second, "re-list recently used directories this often to find bucket-side changes (0: never)")
	fs.DurationVar(&o.revalTTL, "revalidate-ttl", 5*time.Second, "compare a file with the bucket on open when last compared longer ago (0: never)")
	fs.DurationVar(&o.checkpoint, "checkpoint-interval", 5*time.Second, "make written data durable this often without an fsync, bounding what a crash loses (0: only on fsync)")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "address for Prometheus /metrics and the S3 event webhook /events (e.g. 127.0.0.1:9100)")
}

// orNever turns a flag's 0 ("never") into the engine's negative value.
func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func (o *options) engineConfig(log *slog.Logger) (engine.Config, error) {
	cfg := engine.Config{StateDir: o.stateDir, Endpoint: o.endpoint, ExportDelay: o.exportDelay,
		ImportThreshold: int64(o.importThreshold), DirectReadSize: int64(o.directRead),
		TierCapacity: int64(o.tierCap), S3Listen: o.s3Listen, Logger: log,
		PollInterval: orNever(o.pollInterval), RevalidateTTL: orNever(o.revalTTL), CheckpointInterval: orNever(o.checkpoint),
		MetricsListen: o.metricsListen}
	if o.bucketURL != "" {
		b, p, err := bucket.ParseURL(o.bucketURL)
		if err != nil {
			return cfg, err
		}
		cfg.Bucket, cfg.Prefix = b, p
	}
	if cfg.ExportDelay <= 0 {
		return cfg, errors.New("--export-delay must be positive")
	}
	return cfg, nil
}

// config is the engine configuration the flags describe, with a logger
// writing to stderr at --log-level.
func (o *options) config(stderr io.Writer) (engine.Config, *slog.Logger, error) {
	log, err := logger(o.logLevel, stderr)
	if err != nil {
		return engine.Config{}, nil, err
	}
	cfg, err := o.engineConfig(log)
	return cfg, log, err
}

// printEndpoints tells where the embedded store and the metrics listener
// are, when they run.
func printEndpoints(stdout io.Writer, e *engine.Engine) {
	if e.Store != nil {
		fmt.Fprintf(stdout, "bucketfs: embedded S3 store at %s; credentials in %s\n",
			e.Store.Endpoint, filepath.Join(e.StateDir(), "s3.env"))
	}
	if a := e.MetricsAddr(); a != "" {
		fmt.Fprintf(stdout, "bucketfs: metrics at http://%s/metrics, S3 event webhook at http://%s/events\n", a, a)
	}
}

func logger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func mount(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("mount", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var o options
	o.register(fset)
	var aps accesspoint.List
	fset.Var(&aps, "access-point", "mount only this access point, as its identity: NAME=PATH,uid=U,gid=G[,groups=A:B][,mode=0750]")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if len(aps) > 1 {
		return errors.New("mount serves one access point: --access-point given more than once")
	}
	if fset.NArg() != 1 {
		return errors.New("mount needs exactly one MOUNTPOINT")
	}
	mountpoint, err := filepath.Abs(fset.Arg(0))
	if err != nil {
		return err
	}
	if err := checkMountpoint(mountpoint); err != nil {
		return err
	}
	cfg, _, err := o.config(stderr)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	e, err := engine.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	mo := bfuse.Options{Name: e.Bucket.String()}
	if len(aps) == 1 {
		mo.AccessPoint = &aps[0]
	}
	srv, err := bfuse.Mount(e.FS, mountpoint, mo)
	if err != nil {
		return err
	}
	e.Start()
	fmt.Fprintf(stdout, "bucketfs: %s mounted at %s (state in %s)\n", e.Bucket, mountpoint, cfg.StateDir)
	printEndpoints(stdout, e)
	unmounted := make(chan struct{})
	go func() {
		srv.Wait()
		close(unmounted)
	}()
	select {
	case <-ctx.Done():
		if err := srv.Unmount(); err != nil {
			return fmt.Errorf("unmount %s: %w", mountpoint, err)
		}
		<-unmounted
	case <-unmounted:
	}
	fmt.Fprintf(stdout, "bucketfs: unmounted %s\n", mountpoint)
	return nil
}

// checkMountpoint refuses a missing mountpoint, a file, or one that is
// already a mount point, with one line.
func checkMountpoint(dir string) error {
	var st, parent syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return fmt.Errorf("mountpoint %s is not a directory", dir)
	}
	if err := syscall.Stat(filepath.Dir(dir), &parent); err == nil && dir != "/" && parent.Dev != st.Dev {
		return fmt.Errorf("mountpoint %s is busy: something is already mounted there", dir)
	}
	return nil
}

// byteSize is a flag holding a size such as 128KiB, 1MiB, 10G or 4096.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	v, err := parseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 128KiB, 1MiB, 4096)", s)
	}
	return v * mult, nil
}

// Command bucketfs serves an S3 bucket as a POSIX file system.
//
//	bucketfs mount [flags] MOUNTPOINT    FUSE mount, in the foreground
//	bucketfs serve [flags]               NFSv4.1/4.0 server, in the foreground
//	bucketfs status [--state-dir DIR]    where sync stands
//	bucketfs flush [--state-dir DIR] [PATH]  export now
//	bucketfs unmount [--flush] MOUNTPOINT    unmount
//	bucketfs version
//
// With no --bucket, bucketfs runs its embedded S3 store under the state
// directory and writes the store's address and credentials to
// STATE_DIR/s3.env.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/accesspoint"
	"bucketfs/internal/bucket"
	"bucketfs/internal/engine"
	bfuse "bucketfs/internal/frontend/fuse"
	"bucketfs/internal/meta"
)

const version = "0.1.0-dev"

// versionLine is the version with what the build info says of the source:
// the VCS revision (and whether the tree had changes), the time of that
// commit, or else the module version, or else "unknown revision"; and the
// Go release.
func versionLine() string {
	s := "bucketfs " + version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return s
	}
	var rev, at, dirty string
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				dirty = " with uncommitted changes"
			}
		}
	}
	switch {
	case rev != "":
		s += fmt.Sprintf(" (revision %.12s%s, committed %s)", rev, dirty, at)
	case bi.Main.Version != "" && bi.Main.Version != "(devel)":
		s += " (module " + bi.Main.Version + ")" // go install bucketfs@version
	default:
		s += " (unknown revision)" // built with -buildvcs=false, or outside a checkout
	}
	return s + ", " + bi.GoVersion
}

func main() {
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == "mount.bucketfs" {
		// Called by mount(8) as the mount helper (helper.go).
		a, err := helperArgs(args)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mount.bucketfs:", err)
			os.Exit(1)
		}
		args = a
	}
	stdout, stderr := io.Writer(os.Stdout), io.Writer(os.Stderr)
	var status *statusLog
	if os.Getenv(readyFDEnv) != "" {
		// The child of mount --background: both go to its log file,
		// where every line is a log record.
		status = newStatusLog(os.Stderr)
		stdout, stderr = status, status
		slog.SetDefault(slog.New(status.h))
	}
	if err := run(args, stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h: the flags were printed
		}
		if status != nil {
			status.record(slog.LevelError, err.Error())
		} else {
			fmt.Fprintln(os.Stderr, "bucketfs:", err)
		}
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
	case "unmount", "umount":
		return unmountCmd(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, versionLine())
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
  bucketfs status [--state-dir DIR | MOUNTPOINT] [--json]
                                      pending exports, import lag, conflicts, tier use, S3 requests
  bucketfs flush [--state-dir DIR] [PATH]
                                      export PATH (or everything pending) now, without the delay
  bucketfs unmount [--flush] MOUNTPOINT
                                      unmount, exporting everything pending first with --flush
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
	tlsCert, tlsKey                                 string
	uid, gid                                        ownerID
	fileMode, dirMode                               fileMode
	readOnly, trustConditional                      bool
	meta, metaSchema                                string
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
	o.uid, o.gid, o.fileMode, o.dirMode = ownerID(os.Getuid()), ownerID(os.Getgid()), 0o644, 0o755
	fs.StringVar(&o.stateDir, "state-dir", defaultStateDir(), "state directory (metadata, tier, embedded store)")
	fs.StringVar(&o.bucketURL, "bucket", "", "bucket as s3://NAME[/PREFIX]; empty runs the embedded store")
	fs.StringVar(&o.endpoint, "endpoint", "", "S3 endpoint URL (default: AWS_ENDPOINT_URL or AWS)")
	fs.StringVar(&o.meta, "meta", "", "PostgreSQL URL (postgres://USER@HOST/DB?sslmode=...) of a metadata store shared by several servers of one file system; empty: a local store in the state directory")
	fs.StringVar(&o.metaSchema, "meta-schema", "bucketfs", "schema of --meta that holds this file system (one per file system)")
	durationVar(fs, &o.exportDelay, "export-delay", 60*time.Second, "", "quiet period before a changed file is exported")
	fs.Var(&o.importThreshold, "import-threshold", "files smaller than this are copied into the tier on first access")
	fs.Var(&o.directRead, "direct-read-size", "files at least this large are streamed from the bucket")
	fs.Var(&o.tierCap, "tier-capacity", "tier size limit; clean data beyond it is evicted (0: no limit)")
	fs.StringVar(&o.s3Listen, "s3-listen", "127.0.0.1:0", "address of the embedded S3 store")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	durationVar(fs, &o.pollInterval, "poll-interval", 10*time.Second, "never", "re-list recently used directories this often to find bucket-side changes (0: never)")
	durationVar(fs, &o.revalTTL, "revalidate-ttl", 5*time.Second, "never", "compare a file with the bucket on open when last compared longer ago (0: never)")
	durationVar(fs, &o.checkpoint, "checkpoint-interval", 5*time.Second, "only on fsync", "make written data durable this often without an fsync, bounding what a crash loses (0: only on fsync)")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "address for Prometheus /metrics and the S3 event webhook /events (e.g. 127.0.0.1:9100)")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate (chain): HTTPS on --metrics-listen, and RPC-with-TLS for NFS clients (serve)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.Var(&o.uid, "uid", "owner of what carries no owner in the bucket (objects other tools wrote, key prefixes), and of a new file system's root (default: the user running bucketfs)")
	fs.Var(&o.gid, "gid", "group of what carries no group in the bucket, and of a new file system's root (default: the group of the user running bucketfs)")
	fs.Var(&o.fileMode, "file-mode", "permissions (octal) of files whose object carries no mode")
	fs.Var(&o.dirMode, "dir-mode", "permissions (octal) of directories from key prefixes, and of a new file system's root")
	fs.BoolVar(&o.readOnly, "read-only", false, "refuse every change (EROFS) and export nothing, not even what an earlier run left pending; bucket-side changes still show")
	fs.BoolVar(&o.trustConditional, "trust-conditional-writes", false, "take the store's 2xx to a conditional write as proof, without confirming it from the key's versions (AWS S3 is trusted always; others, MinIO among them, have acknowledged a conditional write beside another write of the key)")
}

// certificate loads --tls-cert and --tls-key; nil when neither is given.
func (o *options) certificate() (*tls.Certificate, error) {
	switch {
	case o.tlsCert == "" && o.tlsKey == "":
		return nil, nil
	case o.tlsCert == "" || o.tlsKey == "":
		return nil, errors.New("--tls-cert and --tls-key go together: give both (e.g. --tls-cert server.pem --tls-key server.key)")
	}
	c, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return &c, nil
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
		MetricsListen: o.metricsListen, ReadOnly: o.readOnly, TrustConditionalWrites: o.trustConditional,
		Meta: o.meta, MetaSchema: o.metaSchema,
		Defaults: &meta.Defaults{Uid: uint32(o.uid), Gid: uint32(o.gid), FileMode: uint32(o.fileMode), DirMode: uint32(o.dirMode)}}
	cert, err := o.certificate()
	if err != nil {
		return cfg, err
	}
	if cert != nil {
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	}
	if o.endpoint != "" && o.bucketURL == "" {
		return cfg, errors.New("--endpoint needs --bucket: the embedded store has its own endpoint (e.g. --bucket s3://NAME --endpoint https://minio.example:9000)")
	}
	if o.bucketURL != "" {
		b, p, err := bucket.ParseURL(o.bucketURL)
		if err != nil {
			return cfg, err
		}
		cfg.Bucket, cfg.Prefix = b, p
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

// openError is the line for an engine that did not open: a metrics
// address that cannot be listened on says so in the flag's terms.
func openError(cfg engine.Config, err error) error {
	if errors.Is(err, engine.ErrMetricsListen) {
		return listenError("--metrics-listen", cfg.MetricsListen, err)
	}
	return err
}

// readOnlyNote marks the start line of a read-only file system.
func readOnlyNote(ro bool) string {
	if ro {
		return ", read-only: nothing is exported"
	}
	return ""
}

// printEndpoints tells where the embedded store and the metrics listener
// are, when they run.
func printEndpoints(stdout io.Writer, e *engine.Engine) {
	if e.Store != nil {
		fmt.Fprintf(stdout, "bucketfs: embedded S3 store at %s; credentials in %s\n",
			e.Store.Endpoint, filepath.Join(e.StateDir(), "s3.env"))
	}
	if u := e.MetricsURL(); u != "" {
		fmt.Fprintf(stdout, "bucketfs: metrics at %s/metrics, S3 event webhook at %s/events (token %s)\n",
			u, u, e.EventsToken())
	}
}

// logger is the process's log, to w at level; it becomes slog's and the
// log package's default.
func logger(level string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	switch strings.ToLower(level) {
	case "debug":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "warn", "warning":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	log := slog.New(slog.NewTextHandler(logOutput(w), &slog.HandlerOptions{Level: l}))
	// What libraries log with the log package (go-fuse, net/http) comes
	// out in the same format, with its time.
	slog.SetDefault(log)
	return log, nil
}

func mount(args []string, stdout, stderr io.Writer) (err error) {
	defer func() {
		if err != nil {
			reportFailure(err) // to a background parent, if any
		}
	}()
	fset := flag.NewFlagSet("mount", flag.ContinueOnError)
	var o options
	o.register(fset)
	background := fset.Bool("background", false, "return once mounted, leaving bucketfs running in the background (log in STATE_DIR/bucketfs.log; umount stops it)")
	var aps accesspoint.List
	fset.Var(&aps, "access-point", "mount only this access point, as its identity: NAME=PATH,uid=U,gid=G[,groups=A:B][,mode=0750]")
	if err := parseFlags(fset, args, stdout, command{name: "mount", synopsis: "mount [flags] MOUNTPOINT",
		about: "Mounts the bucket with FUSE and stays in the foreground until Ctrl-C, SIGTERM or\n" +
			"fusermount3 -u MOUNTPOINT. Without --bucket it runs the embedded S3 store.",
		example: "bucketfs mount --bucket s3://my-bucket/data --export-delay 30s /mnt/data"}); err != nil {
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
	if err := checkStateDirApart(o.stateDir, mountpoint); err != nil {
		return err
	}
	if cleared, err := clearDeadMount(mountpoint); err != nil {
		return err
	} else if cleared {
		fmt.Fprintf(stdout, "bucketfs: %s held a dead bucketfs mount (its process was gone); cleared it\n", mountpoint)
	}
	if err := checkMountpoint(mountpoint); err != nil {
		return err
	}
	cfg, _, err := o.config(stderr)
	if err != nil {
		return err
	}
	// Said before a background start detaches, so that it reaches the
	// caller's terminal (the child says it again in its log).
	if ents, err := os.ReadDir(mountpoint); err == nil && len(ents) > 0 {
		hidden := count(int64(len(ents)), "entry is", "entries are")
		fmt.Fprintf(stderr, "bucketfs: note: %s is not empty; its %s hidden while the bucket is mounted over them\n",
			mountpoint, hidden)
	}
	if *background {
		dir, err := filepath.Abs(cfg.StateDir)
		if err != nil {
			return err
		}
		return startInBackground(args, filepath.Join(dir, "bucketfs.log"), stdout)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// A signal while starting cancels the start; once mounted, signals
	// ask for an unmount (serveUntilUnmounted). A signal that arrives in
	// between is passed on, not lost.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mounted := make(chan struct{})
	early := make(chan os.Signal, 1)
	go func() {
		select {
		case sig := <-sigs:
			early <- sig
			cancel()
		case <-mounted:
		}
	}()
	e, err := engine.Open(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted while starting; nothing was mounted")
		}
		return openError(cfg, err)
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
	close(mounted)
	e.Start()
	if err := recordMount(e.StateDir(), mountpoint); err != nil {
		fmt.Fprintf(stderr, "bucketfs: warning: could not record the mount (status and flush by path will not find it): %v\n", err)
	}
	defer forgetMount(e.StateDir(), mountpoint)
	fmt.Fprintf(stdout, "bucketfs: %s mounted at %s%s (state in %s)\n", e.Bucket, mountpoint, readOnlyNote(cfg.ReadOnly), cfg.StateDir)
	printEndpoints(stdout, e)
	reportReady()
	defer sdNotify("STOPPING=1")
	unmounted := make(chan struct{})
	go func() {
		srv.Wait()
		close(unmounted)
	}()
	asks := make(chan os.Signal, 2)
	go func() {
		select {
		case sig := <-early:
			asks <- sig
		default:
		}
		for sig := range sigs {
			asks <- sig
		}
	}()
	m := &liveMount{dir: mountpoint, stateDir: e.StateDir(), conn: fuseConnection(mountpoint),
		unmount: srv.Unmount, unmounted: unmounted, stdout: stdout,
		pending: func() int {
			n, _, _ := e.Meta.QueueStats(context.Background())
			return n
		}}
	if !cfg.ReadOnly {
		m.flush = e.Exporter.Flush
	}
	return m.serveUntilUnmounted(asks)
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

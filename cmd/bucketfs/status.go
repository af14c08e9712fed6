package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"bucketfs/internal/engine"
)

// adminClient talks HTTP over the state directory's admin socket.
func adminClient(stateDir string) *http.Client {
	sock := engine.AdminSocket(stateDir)
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

// stateDirFor is the state directory a command given path works on: the
// --state-dir given, or else the one of the bucketfs mount path is on.
func stateDirFor(fset *flag.FlagSet, path, stateDir string) (string, error) {
	explicit := false
	fset.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "state-dir" })
	if explicit {
		return stateDir, nil
	}
	dir, _, err := stateDirOfPath(path)
	if err != nil {
		return "", fmt.Errorf("%w (or give --state-dir)", err)
	}
	return dir, nil
}

// notRunning reports whether err means no process answers on the socket.
func notRunning(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

func status(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("status", flag.ContinueOnError)
	stateDir := fset.String("state-dir", defaultStateDir(), "state directory of the file system")
	asJSON := fset.Bool("json", false, "print JSON")
	metaURL := fset.String("meta", "", "PostgreSQL URL of a shared metadata store: with no server running here, status is read from the database (the shared queue, the lease, the live servers)")
	metaSchema := fset.String("meta-schema", "bucketfs", "schema of --meta that holds the file system")
	var delay time.Duration
	durationVar(fset, &delay, "export-delay", 60*time.Second, "", "the export delay, for the age of pending exports of a stopped file system")
	if err := parseFlags(fset, args, stdout, command{name: "status", synopsis: "status [--state-dir DIR | MOUNTPOINT] [--meta URL [--meta-schema S]] [--json]",
		about:   "Shows where sync stands: pending exports, import lag, conflicts, tier use, S3 requests.",
		example: "bucketfs status /mnt/data --json"}); err != nil {
		return err
	}
	if fset.NArg() > 1 {
		return errors.New("status takes at most one MOUNTPOINT")
	}
	if fset.NArg() == 1 {
		dir, err := stateDirFor(fset, fset.Arg(0), *stateDir)
		if err != nil {
			return err
		}
		*stateDir = dir
	}
	ctx := context.Background()
	var st engine.Status
	resp, err := adminClient(*stateDir).Get("http://bucketfs/status")
	switch {
	case err == nil:
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("status: %s", strings.TrimSpace(string(b)))
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return fmt.Errorf("status: %w", err)
		}
	case notRunning(err) && *metaURL != "":
		if st, err = engine.SharedStatus(ctx, *metaURL, *metaSchema, delay); err != nil {
			return err
		}
	case notRunning(err):
		if st, err = engine.OfflineStatus(ctx, *stateDir, delay); err != nil {
			return err
		}
	default:
		return fmt.Errorf("status: %w", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, &st)
	return nil
}

func printStatus(w io.Writer, st *engine.Status) {
	state := "stopped (figures from its last run, queue read now)"
	switch {
	case st.FromDatabase && st.Running:
		state = "running elsewhere (read from the shared database)"
	case st.FromDatabase:
		state = "no live server (read from the shared database)"
	case st.Running:
		state = fmt.Sprintf("running (pid %d)", st.PID)
	}
	fmt.Fprintf(w, "bucketfs %s: %s\n", st.Bucket, state)
	if st.EventsToken != "" {
		fmt.Fprintf(w, "  events token      %s (for /events: Authorization: Bearer TOKEN, or https://bucketfs:TOKEN@HOST/events)\n", st.EventsToken)
	}
	pendingBytes := human(st.PendingBytes)
	if st.PendingBytesPartial {
		pendingBytes = "at least " + pendingBytes
	}
	fmt.Fprintf(w, "  pending exports   %d (%s), oldest %s old, export delay %s\n", st.PendingExports,
		pendingBytes, dur(st.OldestPendingAgeS), dur(st.ExportDelayS))
	printServers(w, st)
	fmt.Fprintf(w, "  exported          %d (%s), %s, %d refused by a bucket-side change\n",
		st.Exported, human(st.ExportedBytes), count(st.ExportFailures, "failed attempt", "failed attempts"), st.ExportConflicts)
	fmt.Fprintf(w, "  imported          %s; last import lag %s; events applied %d (%d of own exports), dropped %d, queued %d\n",
		count(st.Imported, "object", "objects"), dur(st.LastImportLagS), st.EventsApplied, st.EventsOwn, st.EventsDropped, st.EventsPending)
	if !st.LastPoll.IsZero() {
		fmt.Fprintf(w, "  last poll         %s ago\n", time.Since(st.LastPoll).Round(time.Second))
	}
	fmt.Fprintf(w, "  import failures   %d", st.ImportFailures)
	if len(st.ImportFailureKeys) > 0 {
		fmt.Fprintf(w, " (e.g. %q)", st.ImportFailureKeys)
	}
	fmt.Fprintln(w)
	for _, l := range st.Listings {
		fmt.Fprintf(w, "  listing           %q: %s so far, %s\n", l.Prefix, count(l.Keys, "key", "keys"), dur(l.RunningS))
	}
	fmt.Fprintf(w, "  conflicts         %d (lost+found holds %d)\n", st.ImportConflicts, st.LostFound)
	fmt.Fprintf(w, "  tier              %s (dirty %s, clean %s)\n", human(st.TierBytes), human(st.TierDirtyBytes), human(st.TierCleanBytes))
	fmt.Fprintf(w, "  data              read %s from the tier, %s direct; written %s; %s\n",
		human(st.Data.ReadTierBytes), human(st.Data.ReadDirectBytes), human(st.Data.WriteBytes),
		count(st.Data.MetadataOps, "metadata operation", "metadata operations"))
	s := st.S3
	local := ""
	if s.LocalHead > 0 {
		local = fmt.Sprintf("; %d HEADs answered in process by the embedded store", s.LocalHead)
	}
	fmt.Fprintf(w, "  S3 requests       GET %d, PUT %d, LIST %d, HEAD %d, COPY %d, DELETE %d, multipart %d, other %d (%s)%s\n",
		s.Get, s.Put, s.List, s.Head, s.Copy, s.Delete, s.Multipart, s.Other, count(int64(s.Retries), "retry", "retries"), local)
	fmt.Fprintf(w, "  S3 bytes          read %s, written %s\n", human(int64(s.BytesRead)), human(int64(s.BytesWritten)))
}

// printServers lists the live servers of a running file system and which
// one holds the sync lease (exports and imports).
func printServers(w io.Writer, st *engine.Status) {
	if st.Lease == nil {
		return
	}
	holder := "nobody (released; the next server takes it)"
	if st.Lease.Holder != "" {
		holder = st.Lease.Holder
	}
	fmt.Fprintf(w, "  servers           %s, sharing the export queue; sync lease held by %s (token %d)\n",
		count(int64(len(st.Servers)), "live server", "live servers"), holder, st.Lease.Token)
	for _, s := range st.Servers {
		var notes []string
		if s.Leader {
			notes = append(notes, "leader")
		}
		if s.This {
			notes = append(notes, "this one")
		}
		addrs := make([]string, 0, len(s.Addrs))
		for _, what := range slices.Sorted(maps.Keys(s.Addrs)) {
			addrs = append(addrs, what+" "+s.Addrs[what])
		}
		fmt.Fprintf(w, "    %s  %s pid %d  %s  heartbeat %s ago  %s\n", s.ID, s.Host, s.PID,
			strings.Join(addrs, ", "), dur(s.HeartbeatAgeS), strings.Join(notes, ", "))
	}
}

func dur(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
}

func human(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

func flush(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("flush", flag.ContinueOnError)
	stateDir := fset.String("state-dir", defaultStateDir(), "state directory of the file system")
	if err := parseFlags(fset, args, stdout, command{name: "flush", synopsis: "flush [--state-dir DIR] [PATH]",
		about: "Exports PATH (a file or directory on the mount), or with no PATH everything pending,\n" +
			"now, without waiting for the export delay.",
		example: "bucketfs flush /mnt/data/report.csv"}); err != nil {
		return err
	}
	url := "http://bucketfs/flush"
	if fset.NArg() > 1 {
		return errors.New("flush takes at most one PATH")
	}
	if fset.NArg() == 1 {
		path := fset.Arg(0)
		dir, err := stateDirFor(fset, path, *stateDir)
		if err != nil {
			return err
		}
		*stateDir = dir
		// The engine knows files by inode number, which means something
		// only on its own mount.
		mnt := mountedAt(*stateDir)
		if mnt == "" {
			return fmt.Errorf("flush %s: the file system of %s is not mounted, so no path names one of its files (flush without PATH exports everything)", path, *stateDir)
		}
		if err := onMount(path, mnt); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return fmt.Errorf("flush %s: %w", path, err)
		}
		url += fmt.Sprintf("?ino=%d", st.Ino)
	}
	err := requestFlush(adminClient(*stateDir), url)
	if notRunning(err) {
		return fmt.Errorf("no bucketfs is running on %s: pending exports go out when it starts", *stateDir)
	}
	if err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	fmt.Fprintln(stdout, "bucketfs: flushed; the bucket has it")
	return nil
}

// requestFlush asks the running engine behind admin to export url's
// target (/flush[?ino=N]) and waits until the bucket has it; a refusal
// comes back as the engine's one-line reason.
func requestFlush(admin *http.Client, url string) error {
	resp, err := admin.Post(url, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		return errors.New(strings.TrimSpace(string(b)))
	}
	return nil
}

// unmountCmd unmounts a bucketfs mount, optionally exporting everything
// pending first, and waits for its process to finish.
func unmountCmd(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("unmount", flag.ContinueOnError)
	stateDir := fset.String("state-dir", defaultStateDir(), "state directory of the file system (found from MOUNTPOINT when not given)")
	flushFirst := fset.Bool("flush", false, "export everything pending before unmounting, so the bucket has it all")
	if err := parseFlags(fset, args, stdout, command{name: "unmount", synopsis: "unmount [--flush] MOUNTPOINT",
		about: "Unmounts a bucketfs mount and waits for it to stop. Changes not yet exported stay\n" +
			"in the state directory and go out at the next start, unless --flush exports them first.\n" +
			"A mount that processes still use stays mounted: the error names them.",
		example: "bucketfs unmount --flush /mnt/data"}); err != nil {
		return err
	}
	if fset.NArg() != 1 {
		return errors.New("unmount needs exactly one MOUNTPOINT")
	}
	mnt, err := filepath.Abs(fset.Arg(0))
	if err != nil {
		return err
	}
	if mountOf(mnt) != mnt {
		return fmt.Errorf("%s is not a bucketfs mountpoint", mnt)
	}
	dir, err := stateDirFor(fset, mnt, *stateDir)
	if err != nil {
		return err
	}
	admin := adminClient(dir)
	if *flushFirst {
		if err := requestFlush(admin, "http://bucketfs/flush"); err != nil {
			return fmt.Errorf("flush before unmount (still mounted): %w", err)
		}
		fmt.Fprintln(stdout, "bucketfs: exported everything pending")
	}
	if err := unmountDir(mnt, false); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%s is busy, in use by %s; still mounted (close them and run this again, or stop its bucketfs with SIGTERM to detach it lazily)",
				mnt, busyHolders(mnt))
		}
		return err
	}
	// The mount's process exports nothing more and closes its state; it is
	// done when its state directory is free to read.
	deadline := time.Now().Add(60 * time.Second)
	var st engine.Status
	for {
		st, err = engine.OfflineStatus(context.Background(), dir, time.Minute)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("unmounted %s, but its bucketfs process has not finished after 60 s: %w", mnt, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the process, not synchronising with it
	}
	if err == nil && st.PendingExports > 0 && !*flushFirst {
		goOut := "go out"
		if st.PendingExports == 1 {
			goOut = "goes out"
		}
		fmt.Fprintf(stdout, "bucketfs: unmounted %s; %s not yet exported %s at the next start (bucketfs unmount --flush exports them first)\n",
			mnt, count(int64(st.PendingExports), "change", "changes"), goOut)
		return nil
	}
	fmt.Fprintf(stdout, "bucketfs: unmounted %s\n", mnt)
	return nil
}

// count is n with the noun in the number n asks for: "1 change",
// "2 changes".
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

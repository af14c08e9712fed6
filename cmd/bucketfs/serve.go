package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/signal"
	"strings"
	"syscall"

	"bucketfs/internal/accesspoint"
	"bucketfs/internal/engine"
	"bucketfs/internal/frontend/nfs4"
)

// serve runs the NFS server on the engine until SIGINT or SIGTERM.
func serve(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("serve", flag.ContinueOnError)
	var o options
	o.register(fset)
	listen := fset.String("nfs-listen", "127.0.0.1:2049", "address the NFS server listens on (open it up explicitly, e.g. 0.0.0.0:2049)")
	allow := fset.String("nfs-allow", "", "comma-separated client networks allowed to connect, e.g. 10.0.0.0/8,127.0.0.1/32 (default: any that reaches --nfs-listen)")
	rootSquash := fset.Bool("root-squash", true, "map uid 0 of clients to nobody (65534); --root-squash=false trusts client root")
	authNone := fset.Bool("allow-auth-none", false, "accept AUTH_NONE clients (as nobody)")
	tlsRequired := fset.Bool("tls-required", false, "refuse NFS clients that do not use RPC-with-TLS (needs --tls-cert)")
	var aps accesspoint.List
	fset.Var(&aps, "access-point", "serve an access point as SERVER:/NAME: NAME=PATH,uid=U,gid=G[,groups=A:B][,mode=0750], repeatable; with any, SERVER:/ lists only them")
	if err := parseFlags(fset, args, stdout, command{name: "serve", synopsis: "serve [flags]",
		about: "Serves the bucket over NFSv4.2, 4.1 and 4.0 and stays in the foreground until\n" +
			"Ctrl-C or SIGTERM. Without --bucket it runs the embedded S3 store.",
		example: "bucketfs serve --nfs-listen 0.0.0.0:2049 --nfs-allow 10.0.0.0/8"}); err != nil {
		return err
	}
	if fset.NArg() != 0 {
		return errors.New("serve takes no arguments; see bucketfs serve -h")
	}
	nets, err := parseNets(*allow)
	if err != nil {
		return err
	}
	cfg, log, err := o.config(stderr)
	if err != nil {
		return err
	}
	cert, _ := o.certificate() // loaded, and checked, by config
	if *tlsRequired && cert == nil {
		return errors.New("--tls-required needs a certificate: give --tls-cert and --tls-key")
	}
	var nfsTLS *tls.Config
	if cert != nil {
		nfsTLS = nfs4.ServerTLSConfig(*cert)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return listenError("--nfs-listen", *listen, err)
	}
	defer ln.Close()
	e, err := engine.Open(ctx, cfg)
	if err != nil {
		return openError(cfg, err)
	}
	defer e.Close()
	// The identity names this server's NFS client records, found again
	// at its next start; on a shared store, the registry tells it which
	// other NFS servers run (nfs4's identity.go).
	identity, err := e.NFSIdentity()
	if err != nil {
		return err
	}
	var registry nfs4.Registry
	if cfg.Shared || cfg.Meta != "" {
		registry = e
	}
	srv, err := nfs4.New(ctx, e.FS, nfs4.Options{AllowNets: nets, RootSquash: *rootSquash, AccessPoints: aps,
		AllowAuthNone: *authNone, TLS: nfsTLS, TLSRequired: *tlsRequired, Logger: log,
		Identity: identity, Registry: registry})
	if err != nil {
		return err
	}
	e.Announce("nfs", ln.Addr().String())
	e.Start()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	fmt.Fprintf(stdout, "bucketfs: serving %s over NFS on %s%s (state in %s)\n", e.Bucket, ln.Addr(), readOnlyNote(cfg.ReadOnly), cfg.StateDir)
	mountOpts := "vers=4.1"
	if nfsTLS != nil {
		fmt.Fprintln(stdout, "bucketfs: NFS: "+tlsNote(*tlsRequired))
		mountOpts += ",xprtsec=tls"
	}
	fmt.Fprintf(stdout, "bucketfs: mount with: mount -t nfs4 -o %s,port=%s %s:/ /mnt/bucket\n", mountOpts, port, host)
	printEndpoints(stdout, e)
	sdNotify("READY=1")
	defer sdNotify("STOPPING=1")
	err = srv.Serve(ctx, ln)
	srv.Close()
	if ctx.Err() != nil {
		fmt.Fprintln(stdout, "bucketfs: stopped")
		return nil
	}
	return err
}

// tlsNote says what NFS clients get with a certificate: TLS offered, or
// required.
func tlsNote(required bool) string {
	if required {
		return "RPC-with-TLS required: clients that do not start TLS (mount -o xprtsec=tls, tlshd running) are refused"
	}
	return "RPC-with-TLS offered (mount -o xprtsec=tls, tlshd running); clients without it are served in the clear (--tls-required refuses them)"
}

// parseNets reads a comma-separated list of networks (or single addresses).
func parseNets(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, fmt.Errorf("--nfs-allow %q: %w", f, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("--nfs-allow %q: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

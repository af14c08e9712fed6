package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// command describes a subcommand for its help: what it does and an
// example.
type command struct {
	name, synopsis, about, example string
}

// parseFlags parses args with fset. A bad flag or value is one line
// saying what is wrong, with an example, never the whole usage; -h and
// --help print the help to stdout (so it can be piped) and return
// flag.ErrHelp.
func parseFlags(fset *flag.FlagSet, args []string, stdout io.Writer, cmd command) error {
	fset.SetOutput(io.Discard)
	fset.Usage = func() {}
	err := fset.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "usage: bucketfs %s\n\n%s\n\nexample:\n  %s\n\nflags:\n", cmd.synopsis, cmd.about, cmd.example)
		printFlags(stdout, fset)
		return err
	}
	if err != nil {
		return fmt.Errorf("%s: %s (see bucketfs %s --help)", cmd.name, flagError(err), cmd.name)
	}
	return nil
}

// printFlags lists fset's flags as --name VALUE, with their meaning and
// default.
func printFlags(w io.Writer, fset *flag.FlagSet) {
	fset.VisitAll(func(f *flag.Flag) {
		arg := ""
		switch f.Value.(type) {
		case duration:
			arg = " DURATION"
		case *byteSize:
			arg = " SIZE"
		case *fileMode:
			arg = " MODE"
		case *ownerID:
			arg = " ID"
		default:
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				arg = " VALUE"
			}
		}
		def := ""
		if _, id := f.Value.(*ownerID); !id && f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = " (default " + f.DefValue + ")" // an id's default is the user's: the usage says so
		}
		fmt.Fprintf(w, "  --%s%s\n      %s%s\n", f.Name, arg, f.Usage, def)
	})
}

// flagError rewords the flag package's errors: "-flag" as "--flag", and
// no "parse error" left unexplained.
func flagError(err error) string {
	s := err.Error()
	s = strings.Replace(s, "for flag -", "for --", 1)
	s = strings.Replace(s, "flag provided but not defined: -", "unknown flag --", 1)
	s = strings.Replace(s, "flag needs an argument: -", "flag needs a value: --", 1)
	return s
}

// duration is a duration flag that refuses negative values, with an
// example in its error.
type duration struct {
	d *time.Duration
	// zero is what 0 means for the flag ("never"), "" if 0 is refused.
	zero string
}

func (f duration) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration: write it like 30s, 5m or 1h")
	}
	switch {
	case v < 0 && f.zero != "":
		return fmt.Errorf("must not be negative (0 means %s)", f.zero)
	case v < 0, v == 0 && f.zero == "":
		return errors.New("must be positive, e.g. 30s")
	}
	*f.d = v
	return nil
}

// durationVar defines a duration flag (see duration).
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, zero, usage string) {
	*p = value
	fs.Var(duration{d: p, zero: zero}, name, usage)
}

// byteSize is a flag holding a size such as 128KiB, 1MiB, 10G or 4096.
type byteSize int64

// String shows the size as it would be written: 128KiB, 1MiB, 4096.
func (b *byteSize) String() string {
	if b == nil {
		return "0"
	}
	v := int64(*b)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if v != 0 && v%u.mult == 0 {
			return strconv.FormatInt(v/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}

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
		return 0, errors.New("not a size: write it like 128KiB, 1MiB or 4096")
	}
	return v * mult, nil
}

// fileMode is a flag holding permission bits, written in octal: 0644.
type fileMode uint32

func (m *fileMode) String() string {
	if m == nil {
		return "0"
	}
	return fmt.Sprintf("%04o", uint32(*m))
}

func (m *fileMode) Set(s string) error {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "0o"), "0O")
	v, err := strconv.ParseUint(t, 8, 32)
	switch {
	case err != nil || t == "":
		return errors.New("not an octal mode: write it like 0644 or 0755")
	case v > 0o7777:
		return errors.New("not a permission mode: at most 07777, e.g. 0644 or 0755")
	}
	*m = fileMode(v)
	return nil
}

// ownerID is a flag holding a numeric user or group id.
type ownerID uint32

func (id *ownerID) String() string {
	if id == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*id), 10)
}

func (id *ownerID) Set(s string) error {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || v == 1<<32-1 {
		return errors.New("not a numeric id: write it like 1000 (id -u NAME and id -g NAME print them)")
	}
	*id = ownerID(v)
	return nil
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/seckill-lab/seckill/internal/config"
)

// errHelpShown means a command printed its help because it was asked to
// (-h): run returns nil for it, and the process exits 0.
var errHelpShown = errors.New("help shown")

// command is one subcommand's flag set and the help it prints for -h.
type command struct {
	name, args, about string
	settings          bool // the command reads SECKILL_* settings
	fs                *flag.FlagSet
}

func newCommand(name, args, about string, settings bool) *command {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by run's caller
	return &command{name: name, args: args, about: about, settings: settings, fs: fs}
}

// parse parses args. -h prints the help to stdout and returns errHelpShown;
// a bad flag, or any argument to a command that takes none, returns an
// error that says where the help is.
func (c *command) parse(args []string, stdout io.Writer) error {
	err := c.fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, c.help())
		return errHelpShown
	case err != nil:
		return fmt.Errorf("%w: %s: %v (see 'seckill %s -h')", errUsage, c.name, err, c.name)
	case c.args == "" && c.fs.NArg() > 0:
		// Go's flags stop at the first word that is not one: without this,
		// "seckill demo extra -addr :9480" would start on the default ports.
		return fmt.Errorf("%w: %s takes no arguments, got %q (see 'seckill %s -h')", errUsage, c.name, c.fs.Args(), c.name)
	}
	return nil
}

// help is the text -h prints: usage, what the command does, its flags and
// the settings it reads.
func (c *command) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: seckill %s", c.name)
	hasFlags := false
	c.fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		b.WriteString(" [flags]")
	}
	if c.args != "" {
		b.WriteString(" " + c.args)
	}
	fmt.Fprintf(&b, "\n\n%s\n", c.about)
	if hasFlags {
		b.WriteString("\nflags:\n")
		c.fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(&b, "  -%-12s %s", f.Name, f.Usage)
			if f.DefValue != "" {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			}
			b.WriteByte('\n')
		})
	}
	if c.settings {
		b.WriteString("\nsettings (environment variables):\n" + config.Help())
	}
	return b.String()
}

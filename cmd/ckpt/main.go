// Command ckpt inspects, validates, resolves and converts safetensors
// checkpoints.
//
// Usage:
//
//	ckpt <command> [flags] [arguments]
//
// Run `ckpt help` for the list of commands and `ckpt <command> -h` for the
// flags of one.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// command is one subcommand of ckpt.
type command struct {
	name    string
	args    string // argument synopsis, e.g. "FILE..."
	summary string // one line
	help    string // longer description shown by -h
	remote  bool   // its paths may be remote locations (remoteHelp)
	run     func(env *env, args []string) error
}

// env carries the streams a command writes to, so that tests can capture them.
type env struct {
	stdout, stderr io.Writer
}

// printJSON writes v to standard output as indented JSON and a newline.
func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// exitError carries an exit status without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake on the command line: the command's usage follows it.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func commands() []*command {
	cmds := []*command{checksumCommand(), convertCommand(), dtypesCommand(), demoCommand(), devicesCommand(), diffCommand(), runMLPCommand(), getCommand(), inspectCommand(), planCommand(), resolveCommand(), validateCommand(), verifyCommand()}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	return cmds
}

func main() {
	os.Exit(run(&env{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

// run executes the command line and returns the process exit status.
func run(e *env, args []string) int {
	if len(args) == 0 {
		printUsage(e.stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c := findCommand(args[1]); c != nil {
				printCommandUsage(e.stdout, c, nil)
				return 0
			}
		}
		printUsage(e.stdout)
		return 0
	}
	c := findCommand(name)
	if c == nil {
		fmt.Fprintf(e.stderr, "ckpt: unknown command %q\n\n", name)
		printUsage(e.stderr)
		return 2
	}
	if err := setupRemote(args[1:]); err != nil {
		fmt.Fprintf(e.stderr, "ckpt %s: %v\n", c.name, err)
		return 1
	}
	err := c.run(e, args[1:])
	var exit exitError
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &exit):
		return exit.code
	case errors.As(err, &usage):
		fmt.Fprintf(e.stderr, "ckpt %s: %s\n\n", c.name, usage.msg)
		printCommandUsage(e.stderr, c, nil)
		return 2
	default:
		fmt.Fprintf(e.stderr, "ckpt %s: %v\n", c.name, err)
		return 1
	}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `ckpt: safetensors checkpoints with a dtype-aware loader.

Usage:
  ckpt <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Paths may be remote locations: s3://BUCKET/PREFIX or https://HOST/FILE
(see "ckpt plan -h").

Run "ckpt <command> -h" for a command's flags and examples.
Start with "ckpt demo": it runs everything on a bundled sample checkpoint.
`)
}

func printCommandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: ckpt %s [flags] %s\n\n%s\n", c.name, c.args, strings.TrimSpace(c.help))
	if c.remote {
		fmt.Fprintf(w, "\n%s\n", remoteHelp)
	}
	if fs != nil {
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(w, "\nFlags:\n")
			fs.SetOutput(w)
			fs.PrintDefaults()
		}
	}
}

// newFlags returns a flag set whose -h prints the command's full help.
func newFlags(e *env, c *command) *flag.FlagSet {
	fs := flag.NewFlagSet("ckpt "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { printCommandUsage(e.stdout, c, fs) }
	return fs
}

// parseFlags parses args, printing help for -h and turning flag mistakes
// into usage errors. Flags may come before or after the positional
// arguments (`ckpt inspect FILE --json`); everything after "--" is
// positional. It returns the positional arguments.
func parseFlags(e *env, c *command, fs *flag.FlagSet, args []string) ([]string, error) {
	var positional, rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, flag.ErrHelp // fs.Usage has printed the help
			}
			return nil, usageError{msg: err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	return append(positional, rest...), nil
}

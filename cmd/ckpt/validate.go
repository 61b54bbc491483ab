package main

import (
	"fmt"

	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/source"
)

func validateCommand() *command {
	c := &command{
		remote:  true,
		name:    "validate",
		args:    "PATH...",
		summary: "check files, indexes or folders against the safetensors rules",
		help: `Validates each PATH — a .safetensors file, a *.safetensors.index.json with
its shards, or a component folder — by the rules of the reference
implementation and ckpt's stricter ones (duplicate keys, untrusted index
paths, shards that lack mapped tensors, FIFOs and devices where files are
expected, files symlinked out of their folder unless --follow-symlinks).
Exit status 0 when all are valid, 1 when any is not. Files that interrupted
saves left next to PATH (hidden .NAME.tmp-* temporaries, .NAME.old-*
backups, the lock file of a killed save, shards no index names, an index
shadowed by a single file) are reported as warnings; they do not make PATH
invalid, and the next save of the set removes them. The JSON form prints one
object per PATH:
{"file": PATH, "ok": bool, "error": {"kind", "tensor", "message"},
"warnings": [message], "leftovers": [{"name", "set", "kind", "reason"}]},
where error.kind is the typed error's kind name (e.g. "header_too_large")
and leftovers[].kind one of temporary, backup, lock, unreferenced,
shadowed.

Examples:
  ckpt validate model.safetensors other.safetensors
  ckpt validate --json model.safetensors.index.json | jq '.[] | select(.ok|not)'`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print JSON")
		variantName := fs.String("variant", "", "precision variant to resolve in folders")
		follow := followFlag(fs)
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			return usageError{msg: "validate needs at least one PATH"}
		}
		results := validatePaths(pos, *variantName, *follow)
		bad := 0
		for _, r := range results {
			if !r.OK {
				bad++
			}
		}
		if *asJSON {
			if err := e.printJSON(results); err != nil {
				return err
			}
		} else {
			for _, r := range results {
				if r.OK {
					fmt.Fprintf(e.stdout, "ok       %s (%d tensors)\n", r.File, r.Tensors)
				} else {
					fmt.Fprintf(e.stdout, "INVALID  %s: [%s] %s\n", r.File, r.Error.Kind, r.Error.Message)
				}
				for _, w := range r.Warnings {
					fmt.Fprintf(e.stdout, "warning  %s: %s\n", r.File, w)
				}
			}
		}
		if bad > 0 {
			return exitError{code: 1}
		}
		return nil
	}
	return c
}

type validateResult struct {
	File      string           `json:"file"`
	OK        bool             `json:"ok"`
	Tensors   int              `json:"tensors,omitempty"`
	Error     *errorInfo       `json:"error,omitempty"`
	Warnings  []string         `json:"warnings,omitempty"`
	Leftovers []shard.Leftover `json:"leftovers,omitempty"`
}

func validatePaths(paths []string, variantName string, follow bool) []validateResult {
	results := make([]validateResult, 0, len(paths))
	for _, p := range paths {
		r := validateResult{File: p}
		t, err := openTarget(p, variantName, follow, false)
		if err == nil {
			r.Tensors = t.ckpt.Len()
			t.Close()
		}
		r.OK = err == nil
		r.Error = describeError(err)
		// Leftovers of interrupted saves are a local folder's matter.
		if source.Scheme(p) == "" {
			if left, err := shard.Leftovers(p); err == nil {
				r.Leftovers = left
				for _, l := range left {
					r.Warnings = append(r.Warnings, fmt.Sprintf("leftover %s (%s): %s", l.Name, l.Kind, l.Reason))
				}
			}
		}
		results = append(results, r)
	}
	return results
}

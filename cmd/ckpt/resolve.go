package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/ckpt-go/ckpt/variant"
)

func resolveCommand() *command {
	c := &command{
		remote:  true,
		name:    "resolve",
		args:    "DIR",
		summary: "explain which weight files a component or pipeline would load",
		help: `Resolves the weights of DIR: a pipeline root (with model_index.json, each
listed component resolved in its folder) or a single component folder. The
plan names, per component, the exact files to load, every file it ignored
and why, and warnings (legacy naming, fallbacks to untagged weights). A
variant plan never mixes variant and untagged weights. Files that are
symlinks leading out of their folder are refused unless --follow-symlinks is
given (a Hugging Face cache snapshot needs it). Exit status 1 when the
folder can't be resolved.

Examples:
  ckpt resolve ./sd-pipeline --variant fp16
  ckpt resolve --json ./transformer`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print JSON")
		variantName := fs.String("variant", "", "precision variant to load (e.g. bf16, fp16); empty for untagged weights")
		follow := followFlag(fs)
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 1 {
			return usageError{msg: "resolve takes exactly one DIR"}
		}
		return resolveAndPrint(e, pos[0], *variantName, *asJSON, *follow)
	}
	return c
}

// resolveOutput is the JSON form of ckpt resolve.
type resolveOutput struct {
	Root       string            `json:"root"`
	Variant    string            `json:"variant"`
	Pipeline   bool              `json:"pipeline"`
	Components []*variant.Plan   `json:"components"`
	Ignored    []variant.Ignored `json:"ignored,omitempty"`
	Warnings   []string          `json:"warnings,omitempty"`
	Error      *errorInfo        `json:"error,omitempty"`
}

func resolveAndPrint(e *env, dir, variantName string, asJSON, follow bool) error {
	out := resolveOutput{Root: dir, Variant: variantName}
	fsys, name, err := openLocation(dir)
	if err != nil {
		return err
	}
	defer closeFS(fsys)
	vopts := []variant.Option{variant.WithSource(cliSource(fsys, follow))}
	var statErr error
	if fsys != nil {
		_, statErr = fs.Stat(fsys, path.Join(name, variant.ModelIndex))
	} else {
		_, statErr = os.Stat(filepath.Join(dir, variant.ModelIndex))
	}
	out.Pipeline = statErr == nil
	pp, err := variant.Resolve(name, variantName, vopts...)
	out.Components, out.Ignored, out.Warnings = pp.Components, pp.Ignored, pp.Warnings
	if err == nil && pp.Failed() {
		err = errors.New("some components could not be resolved")
	}
	out.Error = describeError(err)
	if asJSON {
		if encErr := e.printJSON(out); encErr != nil {
			return encErr
		}
	} else {
		printPlan(e, &out)
	}
	if err != nil {
		if !asJSON {
			fmt.Fprintf(e.stderr, "ckpt resolve: %v\n", withHint(err))
		}
		return exitError{code: 1}
	}
	return nil
}

func printPlan(e *env, out *resolveOutput) {
	w := e.stdout
	v := out.Variant
	if v == "" {
		v = "(untagged)"
	}
	fmt.Fprintf(w, "%s — variant %s\n", out.Root, v)
	// Component warnings are printed under their component; print only the
	// pipeline's own here.
	own := map[string]bool{}
	for _, p := range out.Components {
		for _, warn := range p.Warnings {
			own[warn] = true
		}
	}
	for _, warn := range out.Warnings {
		if !own[warn] {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
	}
	for _, ig := range out.Ignored {
		fmt.Fprintf(w, "  ignored %s: %s\n", ig.File, ig.Reason)
	}
	for _, p := range out.Components {
		name := p.Component
		if name == "" {
			name = filepath.Base(p.Dir)
		}
		fmt.Fprintf(w, "%s:", name)
		if p.Layout != "" {
			fmt.Fprintf(w, " %s", p.Layout)
		}
		if p.Variant != "" {
			fmt.Fprintf(w, ", variant %s", p.Variant)
		}
		if p.Format == variant.FormatPyTorch {
			fmt.Fprint(w, ", PyTorch weights")
		}
		fmt.Fprintln(w)
		if p.Error != nil {
			fmt.Fprintf(w, "  ERROR [%s] %s\n", p.Error.Kind, p.Error.Message)
		}
		if p.Index != "" {
			fmt.Fprintf(w, "  index   %s\n", p.Index)
		}
		for _, f := range p.Files {
			fmt.Fprintf(w, "  load    %s\n", f)
		}
		for _, ig := range p.Ignored {
			fmt.Fprintf(w, "  ignore  %s — %s\n", ig.File, ig.Reason)
		}
		for _, warn := range p.Warnings {
			fmt.Fprintf(w, "  warning %s\n", warn)
		}
	}
}

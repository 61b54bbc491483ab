package ckpt

import (
	"errors"
	"strings"
	"testing"
)

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pat  string
		name string
		want bool
	}{
		// The shorthand: a bare part anywhere, never a substring.
		{"norm", "blocks.0.norm.weight", true},
		{"norm", "norm.weight", true},
		{"norm", "norm", true},
		{"norm", "final.norm", true},
		{"norm", "layernorm.weight", false},
		{"norm", "blocks.0.normalize_x", false},
		{"norm", "blocks.0.norm_q.weight", false},
		{"norm", "blocks.0.norm2.bias", false},
		{"norm", "blocks.0.prenorm.weight", false},
		{"bias", "attn.bias", true},
		{"bias", "attn.biases", false},
		// Literal parts.
		{"blocks.0.attn.weight", "blocks.0.attn.weight", true},
		{"blocks.0.attn.weight", "blocks.0.attn.weight.x", false},
		{"blocks.0.attn.weight", "x.blocks.0.attn.weight", false},
		{"blocks.0.attn", "blocks.0.attn.weight", false},
		// "*" is exactly one part.
		{"blocks.*.attn.weight", "blocks.12.attn.weight", true},
		{"blocks.*.attn.weight", "blocks.attn.weight", false},
		{"blocks.*.attn.weight", "blocks.1.2.attn.weight", false},
		{"*", "weight", true},
		{"*", "a.weight", false},
		// "**" is zero or more parts.
		{"**.bias", "bias", true},
		{"**.bias", "a.b.c.bias", true},
		{"**.bias", "a.b.c.bias.x", false},
		{"blocks.**.weight", "blocks.weight", true},
		{"blocks.**.weight", "blocks.0.attn.weight", true},
		{"blocks.**", "blocks", true},
		{"blocks.**", "blocksx.y", false},
		{"**", "anything.at.all", true},
		{"**.**.bias", "x.bias", true},
		{"a.**.b.**.c", "a.x.b.y.z.c", true},
		{"a.**.b.**.c", "a.x.c", false},
		// Globs within one part never cross a dot.
		{"**.ln_*.weight", "h.0.ln_1.weight", true},
		{"**.ln_*.weight", "h.0.ln.1.weight", false},
		{"**.*norm.*", "model.layers.0.input_layernorm.weight", true},
		{"**.*norm.*", "model.layers.0.norm_q.weight", false},
		{"**.norm[0-9]*.*", "blocks.3.norm2.bias", true},
		{"**.norm[0-9]*.*", "blocks.3.normalize.bias", false},
	}
	for _, c := range cases {
		p, err := ParsePattern(c.pat)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", c.pat, err)
		}
		if got := p.Match(c.name); got != c.want {
			t.Errorf("%q.Match(%q) = %v, want %v", c.pat, c.name, got, c.want)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	for _, s := range []string{"", ".", "a..b", ".a", "a.", "a.[x", "a.x**.b", "a.***"} {
		_, err := ParsePattern(s)
		if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "pattern") {
			t.Errorf("ParsePattern(%q) = %v, want ErrOption naming the pattern", s, err)
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Pattern != s {
			t.Errorf("ParsePattern(%q): error %v does not name the pattern", s, err)
		}
	}
}

// A pattern with many "**" against a long name must stay quick (no
// exponential blow-up worth a hang).
func TestPatternManyDoubleStars(t *testing.T) {
	p := MustParsePattern("**.a.**.a.**.a.**.a.**.b")
	name := "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.c"
	if p.Match(name) {
		t.Fatal("matched")
	}
}

func FuzzPattern(f *testing.F) {
	f.Add("norm", "blocks.0.norm.weight")
	f.Add("**.bias", "a.bias")
	f.Add("a.*.[bc]", "a.x.b")
	f.Fuzz(func(t *testing.T, pat, name string) {
		if len(pat) > 64 || len(name) > 256 {
			return
		}
		p, err := ParsePattern(pat)
		if err != nil {
			if !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "pattern") {
				t.Fatalf("error %v is not ErrOption naming the pattern", err)
			}
			return
		}
		_ = p.Match(name)
	})
}

// FuzzParseRule: the CLI's --keep and --split values never panic, and a
// value that parses prints back to one that parses the same.
func FuzzParseRule(f *testing.F) {
	f.Add("text_encoder/**.norm=F32")
	f.Add("norm=stored")
	f.Add("a.*.b=quantized")
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 128 {
			return
		}
		r, err := ParseRule(s)
		if err == nil {
			r2, err := ParseRule(r.String())
			if err != nil || r2.String() != r.String() {
				t.Fatalf("%q -> %q -> %v %v", s, r.String(), r2, err)
			}
		}
		if sp, err := ParseSplit(s); err == nil && sp.Dim < 0 {
			t.Fatalf("%q: negative dim %d", s, sp.Dim)
		}
	})
}

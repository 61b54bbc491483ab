package ckpt

import (
	"fmt"
	"path"
	"strings"
)

// Pattern matches dotted tensor names part by part. It is the language of
// per-tensor dtype rules:
//
//   - a literal part equals one part of the name: "bias" matches the part
//     "bias" and never "biases" or "attn_bias";
//   - "*" matches exactly one part;
//   - "**" matches zero or more parts;
//   - a part with wildcard characters besides a lone "*" ("ln_*",
//     "*norm", "norm[0-9]") matches one part with path.Match rules, so that
//     families of module names can be named without matching across dots;
//   - a pattern with no dot and no wildcard, such as "norm", is shorthand
//     for "**.norm.**": that part anywhere in the name.
//
// So "norm" matches "blocks.0.norm.weight" and "norm.weight" but not
// "layernorm.weight", "normalize_x", "norm_q.weight" or "norm2.bias";
// "blocks.*.attn.**" matches every tensor under an attention module of any
// block; "**.bias" matches every bias.
type Pattern struct {
	src   string
	parts []string
}

// ParsePattern checks and compiles a pattern. Empty parts ("a..b", a
// leading or trailing dot) and malformed character classes are errors.
func ParsePattern(s string) (Pattern, error) {
	if s == "" {
		return Pattern{}, &Error{Kind: ErrOption, Pattern: s, Msg: "empty pattern"}
	}
	parts := strings.Split(s, ".")
	for _, p := range parts {
		if p == "" {
			return Pattern{}, &Error{Kind: ErrOption, Pattern: s, Msg: "empty part (two dots in a row, or a dot at an end)"}
		}
		if p != "*" && p != "**" && hasMeta(p) {
			if _, err := path.Match(p, ""); err != nil {
				return Pattern{}, &Error{Kind: ErrOption, Pattern: s, Msg: fmt.Sprintf("part %q: %v", p, err)}
			}
		}
		if strings.Contains(p, "**") && p != "**" {
			return Pattern{}, &Error{Kind: ErrOption, Pattern: s, Msg: fmt.Sprintf("part %q: ** must stand alone between dots", p)}
		}
	}
	if len(parts) == 1 && !hasMeta(parts[0]) {
		parts = []string{"**", parts[0], "**"}
	}
	return Pattern{src: s, parts: parts}, nil
}

// MustParsePattern is ParsePattern for patterns known to be valid; it
// panics on an error.
func MustParsePattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the pattern as written.
func (p Pattern) String() string { return p.src }

// Match reports whether the dotted name matches the pattern.
func (p Pattern) Match(name string) bool {
	if len(p.parts) == 0 {
		return false
	}
	return matchParts(p.parts, strings.Split(name, "."))
}

func hasMeta(s string) bool { return strings.ContainsAny(s, "*?[\\") }

// matchParts matches pattern parts against name parts by dynamic
// programming over (pattern suffix, name suffix): O(len(pat)·len(name)),
// whatever the number of "**".
func matchParts(pat, name []string) bool {
	np := len(name)
	// next[j] reports whether pat[i+1:] matches name[j:]; cur is for pat[i:].
	next := make([]bool, np+1)
	cur := make([]bool, np+1)
	next[np] = true // the empty pattern matches the empty name
	for i := len(pat) - 1; i >= 0; i-- {
		p := pat[i]
		if p == "**" {
			// cur[j] = next[j] (zero parts) || cur[j+1] (one more part).
			cur[np] = next[np]
			for j := np - 1; j >= 0; j-- {
				cur[j] = next[j] || cur[j+1]
			}
		} else {
			cur[np] = false
			for j := np - 1; j >= 0; j-- {
				cur[j] = next[j+1] && matchPart(p, name[j])
			}
		}
		cur, next = next, cur
	}
	return next[0]
}

func matchPart(p, s string) bool {
	if p == "*" {
		return true
	}
	if !hasMeta(p) {
		return p == s
	}
	ok, _ := path.Match(p, s) // syntax was checked by ParsePattern
	return ok
}

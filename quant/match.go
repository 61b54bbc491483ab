package quant

import (
	"regexp"
	"strconv"
	"strings"
)

// A matcher decides whether a module (a tensor name without its last
// component, e.g. "model.layers.0.mlp.down_proj") is left unquantized by
// one of a config's patterns. Plain names are looked up in a map (ignore
// lists can name thousands of modules); only patterns are matched one by
// one, and there may be at most maxPatterns of them.
type matcher struct {
	names map[string]bool
	res   []*regexp.Regexp
	kind  matchKind
}

// maxPatterns bounds the regular expressions and globs of one config, so
// that matching every tensor against them stays fast on hostile configs.
const maxPatterns = 256

type matchKind int

const (
	// matchCT: compressed-tensors' ignore: "re:" + a Python regular
	// expression matched at the start of the name (re.match), otherwise
	// the exact module name.
	matchCT matchKind = iota
	// matchGlob: ModelOpt's exclude_modules: fnmatch globs ('*' matches any
	// run of characters, dots included; '?' one character; [...] a set)
	// against the module or one of its parents.
	matchGlob
	// matchHF: transformers' modules_to_not_convert: a name matches the
	// module, one of its parents, or a dot-separated tail of it ("lm_head"
	// matches "model.lm_head"); a pattern with regular-expression syntax
	// other than dots ("model.layers.*.self_attn") is matched at the start
	// of the name.
	matchHF
)

// newMatcher compiles the patterns; field names the config field for
// errors.
func newMatcher(patterns []string, kind matchKind, field string) (*matcher, error) {
	m := &matcher{names: map[string]bool{}, kind: kind}
	for _, p := range patterns {
		var expr string
		switch kind {
		case matchCT:
			r, ok := strings.CutPrefix(p, "re:")
			if !ok {
				m.names[p] = true
				continue
			}
			expr = `^(?:` + r + `)`
		case matchGlob:
			if !strings.ContainsAny(p, "*?[") {
				m.names[p] = true
				continue
			}
			expr = globRegexp(p)
		case matchHF:
			if !strings.ContainsAny(p, `\+*?()|[]{}^$`) {
				m.names[p] = true
				continue
			}
			expr = `^(?:` + p + `)`
		}
		if len(m.res) == maxPatterns {
			return nil, configErr(field, "more than "+strconv.Itoa(maxPatterns)+" patterns", nil)
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			if kind == matchHF { // not a regular expression after all: a name
				m.names[p] = true
				continue
			}
			return nil, configErr(field, "pattern "+quote(p)+" does not compile", err)
		}
		m.res = append(m.res, re)
	}
	return m, nil
}

// match reports whether the module is left unquantized.
func (m *matcher) match(module string) bool {
	if m == nil {
		return false
	}
	if m.names[module] {
		return true
	}
	if m.kind != matchCT { // parents, and for matchHF dot-separated tails
		for i := 0; i < len(module); i++ {
			if module[i] != '.' {
				continue
			}
			if m.names[module[:i]] || (m.kind == matchHF && m.names[module[i+1:]]) {
				return true
			}
		}
	}
	for _, re := range m.res {
		if m.kind == matchGlob {
			for mod := module; ; {
				if re.MatchString(mod) {
					return true
				}
				j := strings.LastIndexByte(mod, '.')
				if j < 0 {
					break
				}
				mod = mod[:j]
			}
		} else if re.MatchString(module) {
			return true
		}
	}
	return false
}

// globRegexp translates an fnmatch pattern (Python's fnmatchcase) into an
// anchored regular expression.
func globRegexp(p string) string {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(p); {
		c := p[i]
		switch c {
		case '*':
			b.WriteString(`.*`)
			for i < len(p) && p[i] == '*' {
				i++
			}
			continue
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '!' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			if j >= len(p) { // no closing bracket: a literal '['
				b.WriteString(`\[`)
				break
			}
			set := p[i+1 : j]
			b.WriteByte('[')
			if strings.HasPrefix(set, "!") {
				b.WriteByte('^')
				set = set[1:]
			} else if strings.HasPrefix(set, "^") {
				b.WriteByte('\\')
			}
			b.WriteString(strings.ReplaceAll(set, `\`, `\\`))
			b.WriteByte(']')
			i = j + 1
			continue
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
		i++
	}
	b.WriteString(`)$`)
	return b.String()
}

// module returns the tensor name without its last dot-separated component.
func module(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[:i]
	}
	return ""
}

// lastComponent returns the part of name after its last dot.
func lastComponent(name string) string {
	return name[strings.LastIndexByte(name, '.')+1:]
}

// looksLikeScale reports whether a stored tensor name looks like quantization
// data that some layout would consume (see Scheme.Unconsumed).
func looksLikeScale(name string) bool {
	last := lastComponent(name)
	switch last {
	case "qweight", "qzeros", "scales", "g_idx", "absmax", "quant_map", "SCB", "scaled_fp8", "comfy_quant":
		return true
	}
	return strings.Contains(last, "_scale") || strings.HasPrefix(last, "scale_") ||
		strings.HasSuffix(last, "_blocks") || strings.HasSuffix(last, "_packed") ||
		strings.Contains(last, "zero_point") || strings.Contains(last, "quant_state")
}

// keptNames are the activation and KV-cache scales left as plain tensors
// for the caller.
var keptNames = map[string]bool{
	"input_scale": true, "input_global_scale": true, "scale_input": true,
	"k_scale": true, "v_scale": true, "q_scale": true, "prob_scale": true, "output_scale": true,
}

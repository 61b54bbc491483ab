package dtype

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Spec describes a dtype to add with Register. Registered dtypes read, write
// and convert like built-in ones: Convert decodes them to float32 and encodes
// from float32, so the float32 path is exact only if every value of the type
// is a float32. Decode and Encode must be safe for concurrent use: Convert
// calls them from several goroutines on disjoint parts of large slices.
// Convert counts Stats.Elements itself and adds the other counters Encode
// returns; when Encode leaves MaxAbs at 0, Convert computes it.
type Spec struct {
	// Name is the safetensors name used in file headers, e.g. "F8_E3M4". It
	// must match [A-Z0-9_]+ and must not collide with a known name or alias.
	Name string
	// Aliases are other spellings Parse accepts (matched case-insensitively).
	Aliases []string
	// Bits is the element size: 8, 16, 32 or 64.
	Bits int
	// Min and Max are the lowest and highest finite values.
	Min, Max float64
	// SmallestPositive is the smallest positive value (optional).
	SmallestPositive float64
	// HasInf, HasNaN and HasNegZero describe the special values.
	HasInf, HasNaN, HasNegZero bool
	// Doc is a one-line description shown by `ckpt dtypes`.
	Doc string
	// Decode writes the float32 value of each element of src (little-endian,
	// Bits/8 bytes each) into dst; len(dst) is the element count.
	Decode func(dst []float32, src []byte)
	// Encode writes src into dst (Bits/8 bytes per element, little-endian)
	// rounding as the type defines, and returns what happened to the values.
	// opts.Saturate asks for saturation instead of overflow to Inf/NaN.
	Encode func(dst []byte, src []float32, opts Options) Stats
}

var nameRE = regexp.MustCompile(`^[A-Z0-9_]+$`)

// The registry is the only global mutable state in ckpt: dtypes added by
// the program, looked up by value and by name.
var registry struct {
	mu     sync.RWMutex
	infos  []*Info // index d - numBuiltin
	byName map[string]DType
}

// Register adds a dtype the library does not know and returns its DType.
// Built-in dtypes can't be replaced, and registering a name or alias twice is
// an error (matching ErrRegister).
func Register(s Spec) (DType, error) {
	fail := func(format string, args ...any) (DType, error) {
		return Invalid, &RegisterError{Name: s.Name, Reason: fmt.Sprintf(format, args...)}
	}
	if !nameRE.MatchString(s.Name) {
		return fail("name must match [A-Z0-9_]+")
	}
	switch s.Bits {
	case 8, 16, 32, 64:
	default:
		return fail("bits must be 8, 16, 32 or 64, not %d", s.Bits)
	}
	if s.Decode == nil || s.Encode == nil {
		return fail("Decode and Encode are required")
	}
	if !(s.Min <= s.Max) {
		return fail("min %g is not <= max %g", s.Min, s.Max)
	}
	keys := []string{strings.ToLower(s.Name)}
	for _, a := range s.Aliases {
		keys = append(keys, normalizeName(a))
	}

	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, k := range keys {
		if k == "" {
			return fail("empty alias")
		}
		if d, ok := builtinNames[k]; ok {
			return fail("%q is the built-in dtype %s", k, d)
		}
		if d, ok := registry.byName[k]; ok {
			return fail("%q is already registered as %s", k, registry.infos[d-numBuiltin].Name)
		}
	}
	if registry.byName == nil {
		registry.byName = make(map[string]DType)
	}
	spec := s
	spec.Aliases = append([]string(nil), s.Aliases...)
	info := &Info{
		Name: s.Name, Bits: s.Bits, Kind: KindFloat, Min: s.Min, Max: s.Max,
		SmallestPositive: s.SmallestPositive, Aliases: spec.Aliases,
		HasInf: s.HasInf, HasNaN: s.HasNaN, HasNegZero: s.HasNegZero,
		Doc: s.Doc, codec: &spec,
	}
	d := numBuiltin + DType(len(registry.infos))
	registry.infos = append(registry.infos, info)
	for _, k := range keys {
		registry.byName[k] = d
	}
	return d, nil
}

func lookupRegistered(d DType) (*Info, bool) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	i := int(d) - int(numBuiltin)
	if i < 0 || i >= len(registry.infos) {
		return nil, false
	}
	return registry.infos[i], true
}

func lookupRegisteredName(key string) (DType, bool) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	d, ok := registry.byName[key]
	return d, ok
}

func registeredDTypes() []DType {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	out := make([]DType, len(registry.infos))
	for i := range out {
		out[i] = numBuiltin + DType(i)
	}
	return out
}

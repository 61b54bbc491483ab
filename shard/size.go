package shard

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// DefaultMaxShardSize is the default largest shard: 5 GB (decimal), as in
// huggingface_hub and transformers.
const DefaultMaxShardSize = 5_000_000_000

var sizeUnits = map[string]int64{
	"":    1,
	"B":   1,
	"KB":  1e3,
	"MB":  1e6,
	"GB":  1e9,
	"TB":  1e12,
	"PB":  1e15,
	"KIB": 1 << 10,
	"MIB": 1 << 20,
	"GIB": 1 << 30,
	"TIB": 1 << 40,
	"PIB": 1 << 50,
}

// ParseSize parses a byte size: a plain number of bytes ("123"), or a
// number with a decimal unit (KB, MB, GB, TB, PB: powers of 1000, as
// huggingface_hub reads "5GB") or a binary one (KiB, MiB, GiB, TiB, PiB:
// powers of 1024). Units are case-insensitive and may follow a space; the
// number may have a fraction ("1.5GB") if the result is a whole number of
// bytes. Negative, fractional-byte and overflowing sizes are errors of kind
// ErrInvalidArgument.
func ParseSize(s string) (int64, error) {
	bad := func(msg string) (int64, error) {
		return 0, &Error{Kind: ErrInvalidArgument, Msg: fmt.Sprintf("invalid size: %q: %s", s, msg)}
	}
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	if num == "" || num == "." || strings.Count(num, ".") > 1 {
		return bad("want a number of bytes, optionally with a unit such as 5GB or 4GiB")
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return bad("unknown unit " + fmt.Sprintf("%q", t[i:]) + " (use B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB)")
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return bad("malformed number")
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return bad("not a whole number of bytes")
	}
	n := r.Num()
	if !n.IsInt64() || n.Int64() > math.MaxInt64 {
		return bad("too large")
	}
	return n.Int64(), nil
}

// Package setname is the one place of the file-naming rules of checkpoint
// sets: the single file PREFIX[.V].safetensors, the index
// PREFIX.safetensors.index[.V].json, shards PREFIX[.V]-00001-of-00003.safetensors,
// diffusers' legacy names (PREFIX.safetensors.V.index.json,
// PREFIX-00001-of-00003.V.safetensors), package shard's swap names
// PREFIX[.V]-00001-of-00003.swap-TOKEN.safetensors, and the hidden files of
// its saves (.NAME.tmp-DIGITS temporaries, .NAME.old-TOKEN backups,
// .PREFIX[.V].safetensors.lock). Package shard writes and cleans sets by
// these rules, package convert writes sets through sinks by them, and
// package variant recognizes them with its fixed prefixes.
package setname

import (
	"fmt"
	"regexp"
	"strings"
)

// Role is what a file is to its set.
type Role int

// The roles of Parse.
const (
	Single      Role = iota + 1 // PREFIX[.V].safetensors
	Index                       // PREFIX.safetensors.index[.V].json
	LegacyIndex                 // PREFIX.safetensors.V.index.json
	Shard                       // PREFIX[.V]-NNNNN-of-NNNNN.safetensors
	LegacyShard                 // PREFIX-NNNNN-of-NNNNN.V.safetensors
	SwapShard                   // PREFIX[.V]-NNNNN-of-NNNNN.swap-TOKEN.safetensors
	Temp                        // .NAME.tmp-DIGITS
	Backup                      // .NAME.old-TOKEN (backups of earlier versions' commits)
	Lock                        // .PREFIX[.V].safetensors.lock
)

// File is a file name parsed as a member of the set of one prefix and
// variant.
type File struct {
	Prefix, Variant string
	Role            Role
}

// Target is the set's single-file name, PREFIX[.V].safetensors: the name
// its lock and its leftovers are reported under.
func (s File) Target() string { return SingleName(s.Prefix, s.Variant) }

// Hidden reports a hidden file of a save (temporary, backup, lock).
func (s File) Hidden() bool { return s.Role >= Temp }

// IsShard reports a shard in any naming.
func (s File) IsShard() bool { return s.Role == Shard || s.Role == LegacyShard || s.Role == SwapShard }

// IsIndex reports an index in any naming.
func (s File) IsIndex() bool { return s.Role == Index || s.Role == LegacyIndex }

const (
	pfx  = `([A-Za-z0-9_][A-Za-z0-9_-]*)`
	vari = `([A-Za-z0-9_]+)`
	// NN is the numbering of a shard, "-00001-of-00003".
	NN = `-\d{5,}-of-\d{5,}`
	// SwapToken is the token of a swap name: 12 lower-case hex digits.
	SwapToken = `[0-9a-f]{12}`
)

// setPatterns recognize the names of a set, tried in order (a shard name
// also reads as a single file with a dashed prefix). Submatch 1 is the
// prefix, 2 the variant.
var setPatterns = []struct {
	re   *regexp.Regexp
	role Role
}{
	{regexp.MustCompile(`^` + pfx + `()\.safetensors\.index\.json$`), Index},
	{regexp.MustCompile(`^` + pfx + `\.safetensors\.index\.` + vari + `\.json$`), Index},
	{regexp.MustCompile(`^` + pfx + `\.safetensors\.` + vari + `\.index\.json$`), LegacyIndex},
	{regexp.MustCompile(`^` + pfx + `(?:\.` + vari + `)?` + NN + `\.swap-` + SwapToken + `\.safetensors$`), SwapShard},
	{regexp.MustCompile(`^` + pfx + `(?:\.` + vari + `)?` + NN + `\.safetensors$`), Shard},
	{regexp.MustCompile(`^` + pfx + NN + `\.` + vari + `\.safetensors$`), LegacyShard},
	{regexp.MustCompile(`^` + pfx + `(?:\.` + vari + `)?\.safetensors$`), Single},
}

var hiddenRE = regexp.MustCompile(`^\.(.+)\.(?:(tmp-[0-9]+)|(old-[0-9a-f]{12})|(lock))$`)

// Parse parses a file name as a member of a set, hidden files of saves
// included; ok is false for names of no set.
func Parse(name string) (s File, ok bool) {
	if m := hiddenRE.FindStringSubmatch(name); m != nil {
		s, ok = ParseVisible(m[1])
		if !ok {
			return File{}, false
		}
		switch {
		case m[2] != "":
			s.Role = Temp
		case m[3] != "":
			s.Role = Backup
		case s.Role == Single:
			s.Role = Lock
		default:
			return File{}, false
		}
		return s, true
	}
	return ParseVisible(name)
}

// ParseVisible parses a name as a visible member of a set (no hidden
// files).
func ParseVisible(name string) (File, bool) {
	for _, p := range setPatterns {
		if m := p.re.FindStringSubmatch(name); m != nil {
			return File{Prefix: m[1], Variant: m[2], Role: p.role}, true
		}
	}
	return File{}, false
}

// Member reports whether name is a visible file of the set of prefix and
// variant, in any naming.
func Member(name, prefix, variant string) bool {
	s, ok := ParseVisible(name)
	return ok && s.Prefix == prefix && s.Variant == variant
}

// SingleName is the set's single file, PREFIX[.V].safetensors.
func SingleName(prefix, variant string) string {
	if variant == "" {
		return prefix + ".safetensors"
	}
	return prefix + "." + variant + ".safetensors"
}

// ShardName is shard i of n, PREFIX[.V]-0000I-of-0000N.safetensors.
func ShardName(prefix, variant string, i, n int) string {
	if variant != "" {
		prefix += "." + variant
	}
	return fmt.Sprintf("%s-%05d-of-%05d.safetensors", prefix, i, n)
}

// SwapName is the name a shard is committed under while a file of its
// own name belongs to the set being replaced.
func SwapName(shard, token string) string {
	return strings.TrimSuffix(shard, ".safetensors") + ".swap-" + token + ".safetensors"
}

// IndexName is the set's index, PREFIX.safetensors.index[.V].json.
func IndexName(prefix, variant string) string {
	if variant == "" {
		return prefix + ".safetensors.index.json"
	}
	return prefix + ".safetensors.index." + variant + ".json"
}

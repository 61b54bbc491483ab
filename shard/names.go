package shard

import (
	"fmt"
	"regexp"
	"strings"
)

// role is what a file is to its set.
type role int

const (
	roleSingle      role = iota + 1 // PREFIX[.V].safetensors
	roleIndex                       // PREFIX.safetensors.index[.V].json
	roleLegacyIndex                 // PREFIX.safetensors.V.index.json
	roleShard                       // PREFIX[.V]-NNNNN-of-NNNNN.safetensors
	roleLegacyShard                 // PREFIX-NNNNN-of-NNNNN.V.safetensors
	roleSwapShard                   // PREFIX[.V]-NNNNN-of-NNNNN.swap-TOKEN.safetensors
	roleTemp                        // .NAME.tmp-DIGITS
	roleBackup                      // .NAME.old-TOKEN (backups of earlier versions' commits)
	roleLock                        // .PREFIX[.V].safetensors.lock
)

// setFile is a file name parsed as a member of the set of one prefix and
// variant.
type setFile struct {
	prefix, variant string
	role            role
}

// target is the set's single-file name, PREFIX[.V].safetensors: the name
// its lock and its leftovers are reported under.
func (s setFile) target() string { return singleName(s.prefix, s.variant) }

func (s setFile) hidden() bool { return s.role >= roleTemp }

func (s setFile) isShard() bool {
	return s.role == roleShard || s.role == roleLegacyShard || s.role == roleSwapShard
}

func (s setFile) isIndex() bool { return s.role == roleIndex || s.role == roleLegacyIndex }

const (
	pfx     = `([A-Za-z0-9_][A-Za-z0-9_-]*)`
	vari    = `([A-Za-z0-9_]+)`
	shardNN = `-\d{5,}-of-\d{5,}`
)

// setPatterns recognize the names of a set, tried in order (a shard name
// also reads as a single file with a dashed prefix). Submatch 1 is the
// prefix, 2 the variant.
var setPatterns = []struct {
	re   *regexp.Regexp
	role role
}{
	{regexp.MustCompile(`^` + pfx + `()\.safetensors\.index\.json$`), roleIndex},
	{regexp.MustCompile(`^` + pfx + `\.safetensors\.index\.` + vari + `\.json$`), roleIndex},
	{regexp.MustCompile(`^` + pfx + `\.safetensors\.` + vari + `\.index\.json$`), roleLegacyIndex},
	{regexp.MustCompile(`^` + pfx + `(?:\.` + vari + `)?` + shardNN + `\.swap-[0-9a-f]{12}\.safetensors$`), roleSwapShard},
	{regexp.MustCompile(`^` + pfx + `(?:\.` + vari + `)?` + shardNN + `\.safetensors$`), roleShard},
	{regexp.MustCompile(`^` + pfx + shardNN + `\.` + vari + `\.safetensors$`), roleLegacyShard},
	{regexp.MustCompile(`^` + pfx + `(?:\.` + vari + `)?\.safetensors$`), roleSingle},
}

var hiddenRE = regexp.MustCompile(`^\.(.+)\.(?:(tmp-[0-9]+)|(old-[0-9a-f]{12})|(lock))$`)

// parseSetName parses a file name as a member of a set; ok is false for
// names of no set.
func parseSetName(name string) (s setFile, ok bool) {
	if m := hiddenRE.FindStringSubmatch(name); m != nil {
		s, ok = parseVisible(m[1])
		if !ok {
			return setFile{}, false
		}
		switch {
		case m[2] != "":
			s.role = roleTemp
		case m[3] != "":
			s.role = roleBackup
		case s.role == roleSingle:
			s.role = roleLock
		default:
			return setFile{}, false
		}
		return s, true
	}
	return parseVisible(name)
}

func parseVisible(name string) (setFile, bool) {
	for _, p := range setPatterns {
		if m := p.re.FindStringSubmatch(name); m != nil {
			return setFile{prefix: m[1], variant: m[2], role: p.role}, true
		}
	}
	return setFile{}, false
}

func singleName(prefix, variant string) string {
	if variant == "" {
		return prefix + ".safetensors"
	}
	return prefix + "." + variant + ".safetensors"
}

func shardName(prefix, variant string, i, n int) string {
	if variant != "" {
		prefix += "." + variant
	}
	return fmt.Sprintf("%s-%05d-of-%05d.safetensors", prefix, i, n)
}

// swapName is the name a shard is committed under while a file of its
// own name belongs to the set being replaced.
func swapName(shard, token string) string {
	return strings.TrimSuffix(shard, ".safetensors") + ".swap-" + token + ".safetensors"
}

func indexName(prefix, variant string) string {
	if variant == "" {
		return prefix + ".safetensors.index.json"
	}
	return prefix + ".safetensors.index." + variant + ".json"
}

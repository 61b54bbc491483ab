package integrity_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ckpt-go/ckpt/integrity"
	"github.com/ckpt-go/ckpt/internal/hostile"
	"github.com/ckpt-go/ckpt/internal/testutil"
)

// verdictKind is the problem kind Verify gives for a verdict of package
// hostile (the kind of error the loaders give): "" for any kind.
var verdictKind = map[string]integrity.Kind{
	"not_regular_file":                    integrity.NotRegular,
	"invalid_argument: unsupported path":  integrity.NotRegular, // a folder named like a file is opened as the file it should be
	"insecure_path":                       integrity.InsecurePath,
	"invalid_index: index too large":      integrity.InvalidIndex,
	"invalid_layout: model index invalid": integrity.InvalidModelIndex,
	"invalid_header_length":               integrity.Truncated,
	"duplicate_key":                       integrity.InvalidHeader,
	"overflow":                            integrity.InvalidHeader,
	"invalid_json":                        integrity.InvalidHeader,
	"invalid_header":                      integrity.InvalidHeader,
}

// TestHostile runs Verify and Checksum on every hostile folder of package
// hostile (FIFOs, devices, sockets, symlinks out of the folder, loops, the
// hub cache layout, oversized indexes, deep headers), with and without
// FollowSymlinks: no hang, no panic, and the loaders' verdict: accepted,
// or refused with a problem of the matching kind that names the culprit.
// The hub cache cases' blobs are not named by their content's hash:
// accepted means that their blobs are the only problems.
func TestHostile(t *testing.T) {
	for _, c := range hostile.Cases(t) {
		t.Run(c.Name, func(t *testing.T) {
			for _, follow := range []bool{false, true} {
				var opts []integrity.Option
				folderWant, fileWant := c.Folder, c.ShardWant
				if follow {
					opts = append(opts, integrity.FollowSymlinks())
					folderWant, fileWant = c.FolderFollow, c.ShardFollow
				}
				targets := map[string]string{c.Dir: folderWant}
				if c.File != "" {
					targets[c.Path()] = fileWant
				}
				for target, want := range targets {
					var rep *integrity.Report
					err := testutil.Within(t, "Verify "+target, func() error {
						var err error
						rep, err = integrity.Verify(context.Background(), target, opts...)
						return err
					})
					what := target + map[bool]string{true: " (follow)"}[follow]
					switch {
					case err != nil:
						if want == hostile.OK || !strings.Contains(err.Error(), c.Culprit) {
							t.Errorf("%s: %v; want %q", what, err, want)
						}
					case want == hostile.OK:
						for _, p := range rep.Problems {
							if !strings.HasPrefix(c.Name, "hub cache") || p.Kind != integrity.BlobMismatch {
								t.Errorf("%s: %v", what, p)
							}
						}
					case len(rep.Problems) == 0:
						t.Errorf("%s: no problem, want %q", what, want)
					default:
						named := false
						for _, p := range rep.Problems {
							named = named || strings.Contains(p.Message, c.Culprit)
							if strings.HasPrefix(c.Name, "hub cache") && p.Kind == integrity.BlobMismatch {
								continue
							}
							if k, ok := verdictKind[want]; ok && p.Kind != k {
								t.Errorf("%s: %v: kind %v, want %v", what, p, p.Kind, k)
							}
						}
						if !named {
							t.Errorf("%s: no problem names %s: %v", what, c.Culprit, messages(rep))
						}
					}
					if want != hostile.OK || strings.HasPrefix(c.Name, "hub cache") {
						continue
					}
					// Checksum on what Verify accepts: no hang, and then
					// every file has checksums.
					err = testutil.Within(t, "Checksum "+target, func() error {
						_, err := integrity.Checksum(context.Background(), target, opts...)
						return err
					})
					if err != nil {
						t.Errorf("Checksum %s: %v", what, err)
						continue
					}
					if rep := verify(t, target, append(opts, integrity.RequireChecksums())...); !rep.OK() {
						t.Errorf("%s after Checksum: %v", what, messages(rep))
					}
				}
			}
		})
	}
}

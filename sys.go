package ckpt

import (
	"fmt"

	"github.com/ckpt-go/ckpt/internal/sysmem"
)

// chooseStrategy resolves ReadAuto for the filesystem holding dir.
func chooseStrategy(s ReadStrategy, dir string) (ReadStrategy, string) {
	switch s {
	case ReadMmap:
		return ReadMmap, "asked for"
	case ReadPread:
		return ReadPread, "asked for"
	}
	fs, err := sysmem.FileSystem(dir)
	return strategyFor(fs, err)
}

// strategyFor chooses between mmap and pread for a filesystem.
func strategyFor(fs sysmem.FS, err error) (ReadStrategy, string) {
	if err != nil {
		return ReadMmap, fmt.Sprintf("filesystem unknown (%v): local assumed", err)
	}
	if fs.Network {
		return ReadPread, fmt.Sprintf("%s is a network filesystem: page faults on a mapping are slow there, large preads are not", fs.Type)
	}
	return ReadMmap, fmt.Sprintf("%s is local: zero-copy views of the mapping", fs.Type)
}

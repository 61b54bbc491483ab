package ckpt

import (
	"fmt"

	"github.com/ckpt-go/ckpt/internal/sysmem"
)

// chooseStrategy resolves readAuto for the filesystem holding dir.
func chooseStrategy(s readStrategy, dir string) (readStrategy, string) {
	switch s {
	case readMmap:
		return readMmap, "asked for"
	case readPread:
		return readPread, "asked for"
	}
	fs, err := sysmem.FileSystem(dir)
	return strategyFor(fs, err)
}

// strategyFor chooses between mmap and pread for a filesystem.
func strategyFor(fs sysmem.FS, err error) (readStrategy, string) {
	if err != nil {
		return readMmap, fmt.Sprintf("filesystem unknown (%v): local assumed", err)
	}
	if fs.Network {
		return readPread, fmt.Sprintf("%s is a network filesystem: page faults on a mapping are slow there, large preads are not", fs.Type)
	}
	return readMmap, fmt.Sprintf("%s is local: zero-copy views of the mapping", fs.Type)
}

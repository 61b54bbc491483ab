package safetensors

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// OpenFS opens the safetensors file name in fsys. A file that is an
// *os.File (as from os.DirFS) is memory-mapped like Open; one that
// implements io.ReaderAt is read on demand; any other is read into memory
// (its size is known from Stat first, so a hostile header cannot make it
// allocate more). Close closes the underlying file. Errors name the file.
//
// What is not a regular file is refused with ErrNotRegular. When fsys
// implements fs.StatFS (os.DirFS and os.Root.FS do), that is checked before
// the file is opened, so that a FIFO does not block the open; a file
// replaced by a FIFO between the two calls can still block it, which only
// Open rules out.
func OpenFS(fsys fs.FS, name string, opts ...OpenOption) (*File, error) {
	cfg := buildConfig(opts)
	fh, size, err := openRegularFS(fsys, name)
	if err != nil {
		return nil, err
	}
	if osf, ok := fh.(*os.File); ok {
		return openOSFile(osf, name, size, cfg)
	}
	if ra, ok := fh.(io.ReaderAt); ok {
		hdr, err := cfg.readHeader(ra, size)
		if err != nil {
			fh.Close()
			return nil, withFile(err, name)
		}
		return newFile(&File{path: name, hdr: hdr, ra: ra, closer: fh, mode: cfg.mode}), nil
	}
	// A plain fs.File: read it whole, never more than Stat promised.
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		fh.Close()
		return nil, &Error{Kind: ErrIO, File: name, Msg: "read", Err: err}
	}
	fh.Close()
	f, err := OpenBytes(data, opts...)
	if err != nil {
		return nil, withFile(err, name)
	}
	f.path = name
	return f, nil
}

// ReadHeaderFS is ReadHeaderFile for the file name of fsys: it reads the
// length field and the header, and no tensor data, through the file's
// ReadAt when it has one and sequentially otherwise. What is not a regular
// file is refused with ErrNotRegular (checked with Stat before the open
// when fsys implements fs.StatFS, as in OpenFS). Errors name the file.
func ReadHeaderFS(fsys fs.FS, name string) (*Header, error) {
	fh, size, err := openRegularFS(fsys, name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	ra, ok := fh.(io.ReaderAt)
	if !ok {
		ra = &sequentialReaderAt{r: fh}
	}
	h, err := ReadHeader(ra, size)
	if err != nil {
		return nil, withFile(err, name)
	}
	return h, nil
}

// openRegularFS opens the file name of fsys and returns its size, refusing
// what is not a regular file with ErrNotRegular: before the open when fsys
// implements fs.StatFS (so that a FIFO does not block the open), and after
// it from the open file's Stat.
func openRegularFS(fsys fs.FS, name string) (fs.File, int64, error) {
	if sfs, ok := fsys.(fs.StatFS); ok {
		st, err := sfs.Stat(name)
		if err != nil {
			return nil, 0, &Error{Kind: ErrIO, File: name, Msg: "stat", Err: err}
		}
		if !st.Mode().IsRegular() {
			return nil, 0, notRegular(name, st.Mode().Type())
		}
	}
	fh, err := fsys.Open(name)
	if err != nil {
		return nil, 0, &Error{Kind: ErrIO, File: name, Msg: "open", Err: err}
	}
	size, err := regularSize(fh, name)
	if err != nil {
		return nil, 0, err
	}
	return fh, size, nil
}

// sequentialReaderAt serves ReadAt calls that ask for the bytes right after
// the previous call's (as ReadHeader does) from a plain reader.
type sequentialReaderAt struct {
	r   io.Reader
	pos int64
}

func (s *sequentialReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off != s.pos {
		return 0, fmt.Errorf("read at %d: the file can only be read in order (at %d)", off, s.pos)
	}
	n, err := io.ReadFull(s.r, p)
	s.pos += int64(n)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

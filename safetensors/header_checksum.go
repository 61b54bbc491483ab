package safetensors

// HeaderBytesChecksum returns the CRC-32C of the file's header as stored: its
// bytes from 0 to Header().DataOffset, the 8-byte length field included.
// Combined with the tensors' checksums in file order (CombineChecksums)
// it gives the CRC-32C of the whole file without reading its data: how
// package convert records the digest of each source file it read.
func (f *File) HeaderBytesChecksum() (uint32, error) {
	n := f.hdr.DataOffset
	if f.data != nil {
		if err := f.rlock(""); err != nil {
			return 0, err
		}
		defer f.mu.RUnlock()
		if n > int64(len(f.data)) {
			return 0, f.err(ErrIO, "", "the header extends past the file")
		}
		var crc uint32
		err := f.protect("", func() { crc = Checksum(f.data[:n]) })
		return crc, err
	}
	b := make([]byte, n) // at most 8 + MaxHeaderSize: the header was read
	if err := f.readAt("", b, 0); err != nil {
		return 0, err
	}
	return Checksum(b), nil
}

package dtype

// kernel converts all elements of src into dst. len(src) and len(dst) hold
// the same whole number of elements of the kernel's source and target dtypes.
// It adds what it did to st.
type kernel func(dst, src []byte, opts Options, st *Stats)

// sumKernel is a kernel that also adds the CRC-32C of src to *crc, as
// crc32c.Update does, reading each byte of src once (ConvertSum).
type sumKernel func(dst, src []byte, opts Options, st *Stats, crc *uint32)

package dtype

// Convert converts the elements of src (dtype from) into dst (dtype to), both
// in little-endian safetensors layout, and reports what happened to the
// values. dst and src must hold the same number of elements.
//
// PLACEHOLDER: the conversion engine is being written (issue 2); this stub
// only checks lengths so that dependent packages compile.
func Convert(dst []byte, to DType, src []byte, from DType, opts Options) (Stats, error) {
	return Stats{}, &ConvertError{From: from, To: to, Err: ErrUnsupported, Reason: "not implemented yet"}
}

package integrity

// WithPieces sets the bytes of a tensor one job checks and the bytes it
// reads at once, so that small tensors are checked in several pieces.
var WithPieces = withPieces

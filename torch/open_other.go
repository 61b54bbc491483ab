//go:build !unix

package torch

import "os"

// openFlags: other systems have no FIFOs that block an open.
const openFlags = os.O_RDONLY

//go:build !((linux && (amd64 || arm64)) || (linux && cgo))

package cuda

import (
	"runtime"

	"github.com/ckpt-go/ckpt/executor"
)

// libName is the driver library on Linux; other systems are not supported.
const libName = "libcuda.so.1"

// symbols is empty where the driver is not supported.
var symbols = map[string]string{}

// openLibcuda reports that the CUDA executor does not run on this system.
func openLibcuda() (driver, error) {
	return nil, &Error{Kind: executor.ErrUnavailable, Msg: "the CUDA executor runs on Linux (amd64, arm64); not on " + runtime.GOOS + "/" + runtime.GOARCH}
}

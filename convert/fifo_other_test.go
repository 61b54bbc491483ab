//go:build !unix

package convert

import "errors"

func mkfifo(path string) error { return errors.New("no FIFOs on this platform") }

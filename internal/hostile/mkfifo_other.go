//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package hostile

func mkfifo(string) error { return errNoFIFO }

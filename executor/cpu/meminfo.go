package cpu

import (
	"bytes"
	"os"
	"strconv"
)

// memInfo returns MemTotal and MemAvailable from /proc/meminfo in bytes
// (zeros where the file does not exist or does not say).
func memInfo() (total, avail int64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	buf := make([]byte, 8<<10) // the fields read are in the first lines
	n, _ := f.Read(buf)
	return parseMemInfo(buf[:n])
}

func parseMemInfo(b []byte) (total, avail int64) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil || v < 0 || v > 1<<43 { // kB: up to 8 EiB
			continue
		}
		if len(f) > 1 && string(f[1]) == "kB" {
			v *= 1024
		}
		switch string(key) {
		case "MemTotal":
			total = v
		case "MemAvailable":
			avail = v
		}
	}
	return total, avail
}

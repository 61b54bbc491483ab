//go:build !unix

package shard

// syncUnsupported: folders cannot be fsynced on this platform.
func syncUnsupported(error) bool { return true }

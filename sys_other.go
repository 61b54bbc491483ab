//go:build !unix

package ckpt

const oNonblock = 0

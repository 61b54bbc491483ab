package ckpt

import "syscall"

// adviseHuge asks for transparent huge pages on a large anonymous mapping;
// it is advice only.
func adviseHuge(b []byte) { _ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) }

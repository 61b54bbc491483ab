// Package pagecache is the advice this repository gives the kernel about
// the pages of its mappings: it releases the pages of read-only file
// mappings that a process has finished with, so that its resident size
// stays small however large the mapped files are (the data stays in the
// page cache), and it maps ahead in one call the pages a reader or a writer
// is about to touch whole (Populate).
package pagecache

// Package pagecache releases the pages of read-only file mappings that a
// process has finished with, so that its resident size stays small however
// large the mapped files are. The data stays in the page cache.
package pagecache

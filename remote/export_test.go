package remote

// SetListPageSize sets the MaxKeys of listings (0: the server's default),
// so that tests see several pages without thousands of objects.
func SetListPageSize(n int32) { listPageSize.Store(n) }

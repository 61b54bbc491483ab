package remote

import (
	"time"
)

// Option configures a file system of this package (NewS3FS, NewHTTPFS, and
// the defaults of registered locations, SetOptions).
type Option func(*options)

type options struct {
	concurrency int
	chunk       int64
	maxGap      int64
	headSize    int64
	retries     int
	backoff     time.Duration
	maxBackoff  time.Duration
	timeout     time.Duration
	cache       *Cache
	storeSums   bool
}

// Defaults of the options.
const (
	DefaultConcurrency    = 16
	DefaultChunkSize      = 8 << 20
	DefaultMaxGap         = 1 << 20
	DefaultHeadSize       = 1 << 20
	DefaultRetries        = 5
	DefaultBackoff        = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultRequestTimeout = 60 * time.Second
)

func defaultOptions() options {
	return options{
		concurrency: DefaultConcurrency,
		chunk:       DefaultChunkSize,
		maxGap:      DefaultMaxGap,
		headSize:    DefaultHeadSize,
		retries:     DefaultRetries,
		backoff:     DefaultBackoff,
		maxBackoff:  DefaultMaxBackoff,
		timeout:     DefaultRequestTimeout,
		storeSums:   true,
	}
}

func buildOptions(opts []Option) options {
	o := defaultOptions()
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// WithConcurrency sets how many ranged requests a load keeps in flight
// (default 16; values below 1 mean 1).
func WithConcurrency(n int) Option { return func(o *options) { o.concurrency = max(n, 1) } }

// WithChunkSize sets the most bytes one ranged request of a load covers
// (default 8 MiB; at least 64 KiB): neighbouring tensors are coalesced up
// to it.
func WithChunkSize(n int64) Option { return func(o *options) { o.chunk = max(n, 64<<10) } }

// WithMaxGap sets the most unused bytes between two tensors that are still
// read in one request (default 1 MiB; 0 coalesces only adjacent ones).
func WithMaxGap(n int64) Option { return func(o *options) { o.maxGap = max(n, 0) } }

// WithHeadSize sets how many bytes opening a file reads speculatively
// (default 1 MiB, at least 4 KiB): a safetensors header that fits costs one
// request, a larger one a second. Once files were opened and only their
// first bytes read (the shards of a checkpoint, when the loader reads their
// headers), later opens read twice the most those needed, at least 64 KiB
// and at most this: planning a many-shard checkpoint reads about its
// headers, still one request each.
func WithHeadSize(n int64) Option { return func(o *options) { o.headSize = max(n, 4<<10) } }

// WithRetries sets how many times a failed request is retried (default 5):
// throttling (429, 503 SlowDown), server errors (5xx), timeouts, broken
// connections and responses that end early are retried with exponential
// backoff and jitter, a read that had started resuming where it stopped.
// Other failures are not retried.
func WithRetries(n int) Option { return func(o *options) { o.retries = max(n, 0) } }

// WithBackoff sets the first retry's delay bound and the largest one
// (defaults 100 ms and 5 s); each retry waits a random time up to the
// bound, which doubles per retry.
func WithBackoff(first, most time.Duration) Option {
	return func(o *options) {
		o.backoff, o.maxBackoff = max(first, time.Millisecond), max(most, first, time.Millisecond)
	}
}

// WithRequestTimeout sets the deadline of one request, its body included
// (default 60 s). A request past it is cancelled and retried.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = max(d, time.Millisecond) }
}

// WithCache reads through c: objects loaded whole are kept in c, keyed by
// location and ETag, and read from it while their ETag stays the same.
func WithCache(c *Cache) Option { return func(o *options) { o.cache = c } }

// WithStoreChecksums sets whether the bytes read are compared with the
// CRC-32C the store holds for the object (default true; see the package
// documentation, "Integrity"): the store is asked for it once per object
// whose data is read (one HeadObject; for a composite checksum also the
// part boundaries), and each byte that arrives is run through CRC-32C.
// false asks nothing and compares nothing.
func WithStoreChecksums(on bool) Option { return func(o *options) { o.storeSums = on } }

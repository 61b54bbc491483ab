// Package remote reads checkpoints from S3-compatible object stores and
// HTTP(S) servers without copying whole files to local disk first.
//
// Importing it registers the s3://, https:// and http:// schemes with
// package source (source.Register), the way image formats and database/sql
// drivers register, so that ckpt.Open and the ckpt command accept
//
//	s3://BUCKET/PREFIX/model             a component folder or pipeline root
//	s3://BUCKET/PREFIX/model.safetensors.index.json
//	https://HOST/PATH/model.safetensors  a file or an index (not a folder)
//
// A program that never imports it links no object-store client.
//
// The library takes the caller's client: SetS3Client sets the *s3.Client
// (github.com/aws/aws-sdk-go-v2/service/s3) that s3:// locations are read
// with; NewS3Client builds one from an aws.Config with the settings
// S3-compatible stores need (explicit endpoint, path-style addressing,
// request checksums only where required). The ckpt command builds its
// client with config.LoadDefaultConfig, so credentials and region come from
// the standard AWS environment, shared config files and instance roles; it
// honours AWS_ENDPOINT_URL_S3 and AWS_ENDPOINT_URL, and uses path-style
// addressing when the endpoint's host is an IP address or localhost
// (PathStyle) or when CKPT_S3_PATH_STYLE=1. The package itself reads no
// environment variables: a program passes what it wants to NewS3Client
// and the options.
//
// A program can also open a file system itself and pass it to ckpt.Open
// with ckpt.WithFS: NewS3FS(client, bucket) or NewHTTPFS(client, baseURL).
//
// # Reading
//
// Opening a file costs one ranged GET of its first bytes, which also gives
// its size and ETag: planning a checkpoint reads the folder listing, the
// index, the configs and one request per shard for its header, and nothing
// else (see WithHeadSize). Every later read of a file is pinned to the
// version seen at open (If-Match on the ETag; over HTTP without an ETag,
// If-Unmodified-Since on Last-Modified; and each response's validators,
// size and range checked): an object replaced in the middle of a load fails
// with ErrChanged, never giving bytes of two versions.
//
// Loads read tensor data with parallel ranged GETs (WithConcurrency, 16 by
// default) of up to WithChunkSize (8 MiB) each, neighbouring tensors
// coalesced into one request, straight into the destination buffers;
// conversions go through staging buffers bounded by the loader's staging
// budget. Throttling, server errors, timeouts, broken connections and
// bodies that end early are retried with exponential backoff and jitter
// (WithRetries, WithBackoff), a broken body resuming where it stopped; each
// request has a deadline (WithRequestTimeout). Progress and cancellation
// work as for local files.
//
// An optional read-through Cache keeps objects loaded whole on local disk,
// keyed by location and ETag, bounded in size and shared safely between
// processes.
//
// # Integrity
//
// An S3 store keeps a CRC-32C of an object written with one (this
// package's S3Sink sends one with every part, and `aws s3 cp
// --checksum-algorithm CRC32C` does): FULL_OBJECT, the CRC of the whole
// object, or COMPOSITE for a multipart upload, the CRC of the parts' CRCs
// followed by "-N". The FS compares what arrives with it. The first time
// an object's data is read (not when it is opened: planning asks nothing
// more), it asks the store for that checksum of the version it pinned:
// one HeadObject with ChecksumMode ENABLED and If-Match; for a composite
// checksum also the part boundaries, from GetObjectAttributes ObjectParts
// or, where the store does not list parts (versitygw), one HeadObject per
// part (objects of up to 1000 parts). From then on every byte handed out
// of the object — by ReadRanges, by ReadAt and Read, and the bytes read
// between coalesced spans — is run through CRC-32C as it passes
// (safetensors.UpdateChecksum: carry-less multiplication on amd64, the CRC
// instructions on arm64; a fraction of the time the bytes take to
// arrive), the pieces' CRCs combined, so that parallel reads in any order
// are checked without a second pass and without holding the bytes. When
// the bytes read cover the whole object (FULL_OBJECT), or every part
// (COMPOSITE; each part alone where the store listed the parts' own CRCs),
// they are compared, and a difference fails the read that completed them,
// and every later read of the object through that FS, with an *Error of
// kind ErrChecksum naming the object, its ETag (and version ID) and both
// CRCs; it matches ckpt.ErrChecksum, so the loader refuses the load. The
// store answering for the pinned ETag with another size is ErrChecksum too
// (a new ETag is ErrChanged, as before): bytes of one version that differ
// are an error, never a silent reload.
//
// Covered: a load of whole shards (ckpt's Load reads every byte of each
// shard it loads; the header came from the first GET, which counts), Read
// and ReadAt of whole objects past their first bytes, VerifyObject (which
// reads an object whole for that purpose, for `ckpt verify`), and bytes
// served from the Cache (an entry that fails is removed; an object that
// fails is never committed to it). Loading the same object again through
// one FS is verified again when it covers the object again.
//
// Not covered: reads of part of an object (loading some tensors of a
// shard) unless they cover whole parts whose CRCs the store lists; files
// read only from their first GET (JSON configs and indexes, files smaller
// than WithHeadSize read through Read: VerifyObject checks them); objects
// stored without a CRC-32C (AWS and versitygw store a CRC64NVME of objects
// uploaded without a checksum, which this package does not compute) or
// with another algorithm; composite objects of more than 1000 parts on
// stores that do not list parts; HTTP(S) sources. These read as before.
// WithStoreChecksums(false) turns the comparison off.
//
// # Errors
//
// Errors are *Error values with an ErrorKind (errors.Is(err,
// remote.ErrChanged)) naming the location, the byte range, the HTTP status
// and the attempts made; the loader wraps them in its own errors. Missing
// objects also match fs.ErrNotExist.
//
// # Limits
//
// Plain HTTP cannot list folders: https:// locations name a safetensors
// file or an index, whose shards are found beside it, and the server must
// support Range requests (ErrRequest otherwise).
//
// # Writing
//
// Importing this package also registers s3:// with package sink
// (sink.Register), so that convert.Save, convert.Run (ckpt convert),
// convert.SaveShard and convert.Commit write
// s3://BUCKET/PREFIX locations through an S3Sink: each file a multipart
// upload whose parts are sent in parallel with their CRC-32C, aborted on
// failure or cancellation (no part left behind), the index written last
// and, where none existed, with If-None-Match: * (ErrExists when someone
// else wrote it meanwhile). SetSinkOptions tunes the part size and the
// parts in flight.
package remote

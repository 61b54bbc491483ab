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
// support Range requests (ErrNoRange otherwise).
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

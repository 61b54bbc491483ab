module github.com/ckpt-go/ckpt

go 1.23

require (
	github.com/google/go-cmp v0.7.0
	github.com/klauspost/compress v1.18.0
	github.com/x448/float16 v0.8.4
)

require github.com/ebitengine/purego v0.10.2

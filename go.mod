module github.com/ckpt-go/ckpt

go 1.23

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	golang.org/x/sys v0.35.0 // indirect
)

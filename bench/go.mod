module github.com/ckpt-go/ckpt/bench

go 1.23.0

require (
	github.com/ckpt-go/ckpt v0.0.0
	golang.org/x/sys v0.35.0
)

require github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c

require (
	github.com/ebitengine/purego v0.10.2 // indirect
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)

replace github.com/ckpt-go/ckpt => ../

module github.com/ckpt-go/ckpt/bench

go 1.23.0

require (
	github.com/ckpt-go/ckpt v0.0.0
	golang.org/x/sys v0.35.0
)

require github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c

replace github.com/ckpt-go/ckpt => ../

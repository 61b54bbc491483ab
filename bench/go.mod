module github.com/ckpt-go/ckpt/bench

go 1.25.0

require (
	github.com/ckpt-go/ckpt v0.0.0
	golang.org/x/sys v0.35.0
)

require (
	github.com/aws/aws-sdk-go-v2 v1.41.2
	github.com/aws/aws-sdk-go-v2/service/s3 v1.96.2
	github.com/nlpodyssey/safetensors v0.0.0-20250209183917-bfb01cc25f7c
)

require (
	github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream v1.7.5 // indirect
	github.com/aws/aws-sdk-go-v2/internal/configsources v1.4.18 // indirect
	github.com/aws/aws-sdk-go-v2/internal/endpoints/v2 v2.7.18 // indirect
	github.com/aws/aws-sdk-go-v2/internal/v4a v1.4.18 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/accept-encoding v1.13.5 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/checksum v1.9.10 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/presigned-url v1.13.18 // indirect
	github.com/aws/aws-sdk-go-v2/service/internal/s3shared v1.19.18 // indirect
	github.com/aws/smithy-go v1.24.1 // indirect
	github.com/ebitengine/purego v0.11.3 // indirect
	github.com/klauspost/compress v1.18.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)

replace github.com/ckpt-go/ckpt => ../

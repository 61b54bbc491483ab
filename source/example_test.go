package source_test

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing/fstest"

	"github.com/ckpt-go/ckpt/source"
)

// A program registers a scheme of its own; ckpt.Open, and every tool built
// on source.Open, then accept its locations.
func Example() {
	store := fstest.MapFS{
		"models/tiny/config.json": {Data: []byte(`{"model_type": "tiny"}`)},
	}
	source.Register("mem", func(_ context.Context, location string) (fs.FS, string, error) {
		name := strings.TrimPrefix(location, "mem://")
		if name == "" {
			name = "."
		}
		return store, name, nil
	})

	fsys, name, err := source.Open(context.Background(), "mem://models/tiny")
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := fs.ReadFile(fsys, name+"/config.json")
	fmt.Println(string(b), err)

	// A path is the operating system's: no file system, the path as given.
	fsys, name, err = source.Open(context.Background(), "/data/tiny")
	fmt.Println(fsys == nil, name, err)

	_, _, err = source.Open(context.Background(), "s3://bucket/tiny")
	fmt.Println(err)
	// Output:
	// {"model_type": "tiny"} <nil>
	// true /data/tiny <nil>
	// open s3://bucket/tiny: no source is registered for s3:// locations (import github.com/ckpt-go/ckpt/remote to register it)
}

func ExampleScheme() {
	for _, loc := range []string{"s3://bucket/model", "HTTPS://host/model.safetensors", "/data/model", `C://model`} {
		fmt.Printf("%q\n", source.Scheme(loc))
	}
	// Output:
	// "s3"
	// "https"
	// ""
	// ""
}

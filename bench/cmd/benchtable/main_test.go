package main

import (
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	in := `goos: linux
BenchmarkHeaderParse/tensors=1/impl=copy-2   	35427151	         5.0 ns/op	22380.07 MB/s
BenchmarkHeaderParse/tensors=1/impl=ckpt-2   	  157963	      1000 ns/op	  73.27 MB/s	     928 B/op	      13 allocs/op
BenchmarkHeaderParse/tensors=1/impl=ckpt-2   	  157963	      3000 ns/op	  70.00 MB/s	     928 B/op	      13 allocs/op
BenchmarkHeaderParse/tensors=1/impl=ckpt-2   	  157963	      2000 ns/op	  71.00 MB/s	     928 B/op	      13 allocs/op
BenchmarkHeaderParse/tensors=1/impl=peer-2   	   20865	     12000 ns/op	  10.65 MB/s
PASS
`
	var out strings.Builder
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"| case | copy | ckpt | peer | ckpt speed-up vs peer |", "| tensors=1 | 5.0 ns (22380 MB/s) | 2.0 µs (71 MB/s) | 12.0 µs (11 MB/s) | 6.0× |"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

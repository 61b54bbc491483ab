package remote_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/remote"
)

// listedPart is one part as a store's GetObjectAttributes ObjectParts
// lists it; crc "" lists the part without its checksum.
type listedPart struct {
	size int64
	crc  string
}

// serveParts answers GetObjectAttributes the way AWS S3 does for an object
// uploaded in parts: the ETag and the parts, page parts at a time
// (x-amz-max-parts, x-amz-part-number-marker), counting the requests.
func serveParts(etag string, parts []listedPart, page int, requests *int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		*requests++
		if !strings.Contains(strings.Join(r.Header.Values("X-Amz-Object-Attributes"), ","), "ObjectParts") {
			http.Error(w, "ObjectParts not asked for", http.StatusBadRequest)
			return
		}
		from, _ := strconv.Atoi(r.Header.Get("X-Amz-Part-Number-Marker"))
		n := page
		if m, err := strconv.Atoi(r.Header.Get("X-Amz-Max-Parts")); err == nil && m < n {
			n = m
		}
		to := min(from+n, len(parts))
		var b strings.Builder
		fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?><GetObjectAttributesResponse xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><ETag>%s</ETag><ObjectParts>`, strings.Trim(etag, `"`))
		fmt.Fprintf(&b, `<PartsCount>%d</PartsCount><PartNumberMarker>%d</PartNumberMarker><MaxParts>%d</MaxParts>`, len(parts), from, n)
		if to < len(parts) {
			fmt.Fprintf(&b, `<IsTruncated>true</IsTruncated><NextPartNumberMarker>%d</NextPartNumberMarker>`, to)
		} else {
			b.WriteString(`<IsTruncated>false</IsTruncated>`)
		}
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, `<Part><PartNumber>%d</PartNumber><Size>%d</Size>`, i+1, parts[i].size)
			if parts[i].crc != "" {
				fmt.Fprintf(&b, `<ChecksumCRC32C>%s</ChecksumCRC32C>`, parts[i].crc)
			}
			b.WriteString(`</Part>`)
		}
		b.WriteString(`</ObjectParts></GetObjectAttributesResponse>`)
		w.Header().Set("Content-Type", "application/xml")
		w.Write([]byte(b.String()))
	}
}

// A composite checksum whose parts the store lists (GetObjectAttributes
// ObjectParts, which the test server lacks: a proxy answers it as AWS S3
// does): the boundaries come from the listing, paged, with no HeadObject
// per part; with the parts' own CRCs, a flipped bit is named by its part;
// without them, by the composite checksum; a listing that does not tile
// the object is not trusted (the parts are probed instead).
func TestS3StoreChecksumListedParts(t *testing.T) {
	s := needLocalS3(t)
	const part = 5 << 20
	file := ckpttest.File(t, ckpttest.Tensors(t, "a:F32[1024,1024] b:BF16[1024,2048] c:F32[768,1024] d:F16[33]")...) // 11 MiB: 3 parts
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := load(t, open(t, file))
	bucket := s.NewBucket(t)
	putParts(t, s, bucket, "model.safetensors", data, part, types.ChecksumTypeComposite)
	h, err := s.Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("model.safetensors")})
	if err != nil {
		t.Fatal(err)
	}
	etag := aws.ToString(h.ETag)
	var withCRC, withoutCRC, untiled []listedPart
	for off := 0; off < len(data); off += part {
		p := data[off:min(off+part, len(data))]
		withCRC = append(withCRC, listedPart{int64(len(p)), crcB64(p)})
		withoutCRC = append(withoutCRC, listedPart{size: int64(len(p))})
		untiled = append(untiled, listedPart{int64(len(p)) - 1, crcB64(p)})
	}
	loc := "s3://" + bucket + "/model.safetensors"
	for _, c := range []struct {
		name     string
		parts    []listedPart
		page     int
		heads    int64 // HeadObject and GetObjectAttributes requests of one load
		listings int   // GetObjectAttributes requests of one load
		msg      string
	}{
		{"with CRCs", withCRC, 1000, 2, 1, "part 2 of 3"},
		{"paged", withCRC, 2, 3, 2, "part 2 of 3"},
		{"without CRCs", withoutCRC, 1000, 2, 1, "composite CRC-32C"},
		{"not tiling", untiled, 1000, 2 + 3, 1, "composite CRC-32C"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newFaultProxy(t, s.Endpoint)
			listings := 0
			p.attributes = serveParts(etag, c.parts, c.page, &listings)
			client := s.ClientAt(p.URL())
			fsys := remote.NewS3FS(client, bucket, remote.WithChunkSize(1<<20))
			sameTensors(t, "good", load(t, open(t, "model.safetensors", ckpt.WithFS(fsys))), want)
			if st := fsys.Stats(); st.HEADs != c.heads || listings != c.listings {
				t.Errorf("%+v and %d listings, want %d HEADs and %d listings", st, listings, c.heads, c.listings)
			}
			flipBit(t, s, bucket, "model.safetensors", part+12345)
			defer flipBit(t, s, bucket, "model.safetensors", part+12345)
			m := open(t, "model.safetensors", ckpt.WithFS(remote.NewS3FS(client, bucket, remote.WithChunkSize(1<<20))),
				ckpt.WithVerify(ckpt.VerifyNever))
			_, err := tryLoad(context.Background(), m)
			checksumErr(t, "flip in part 2", err, loc)
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("want %q in %v", c.msg, err)
			}
		})
	}
}

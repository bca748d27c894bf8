package tier

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestExp(t *testing.T) {
	ctx := context.Background()
	for _, trailing := range []bool{false, true} {
		c, err := minio.New("127.0.0.1:24999", &minio.Options{Creds: credentials.NewStaticV4("sluicetestaccess", "sluicetestsecret0123456789", ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath, TrailingHeaders: trailing})
		if err != nil {
			t.Fatal(err)
		}
		b := "sluice-test"
		put := func(k string, data []byte, opts minio.PutObjectOptions) {
			info, err := c.PutObject(ctx, b, k, bytes.NewReader(data), int64(len(data)), opts)
			fmt.Printf("trailing=%v put %q: %+v err=%v\n", trailing, k, info.ChecksumCRC32C+"|"+info.ChecksumMode, err)
		}
		pfx := fmt.Sprintf("exp%v/", trailing)
		put(pfx+"a", []byte("x"), minio.PutObjectOptions{})
		put(pfx+"a/b", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"c/d", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"c", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"e-f", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"e/g", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"e.h", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"empty", nil, minio.PutObjectOptions{})
		put(pfx+"x/../y", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"x/./y", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"x//y", []byte("y"), minio.PutObjectOptions{})
		put(pfx+"dir/", nil, minio.PutObjectOptions{})
		o := minio.PutObjectOptions{}
		o.SetMatchETagExcept("*")
		put(pfx+"e-f", []byte("z"), o)
		put(pfx+"new", []byte("z"), o)
		big := bytes.Repeat([]byte("0123456789abcdef"), 21<<20/16)
		put(pfx+"big", big, minio.PutObjectOptions{})
		put(pfx+"bigfull", big, minio.PutObjectOptions{AutoChecksum: minio.ChecksumFullObjectCRC32C})
		put(pfx+"big", big, o)
		put(pfx+"bignew", big, o)
		for obj := range c.ListObjects(ctx, b, minio.ListObjectsOptions{Prefix: pfx, Recursive: true}) {
			fmt.Printf("  list %q %d %v err=%v\n", obj.Key, obj.Size, obj.ETag, obj.Err)
		}
		for _, k := range []string{"big", "bigfull", "e-f", "empty"} {
			st, err := c.StatObject(ctx, b, pfx+k, minio.StatObjectOptions{Checksum: true})
			fmt.Printf("  stat %q size=%d etag=%q crc=%q mode=%q lm=%v err=%v\n", k, st.Size, st.ETag, st.ChecksumCRC32C, st.ChecksumMode, st.LastModified, err)
		}
		core := minio.Core{Client: c}
		for _, rg := range [][2]int64{{0, 0}, {1, 0}, {2, 0}, {0, 5}, {1, 5}} {
			opts := minio.GetObjectOptions{}
			if rg[1] > 0 {
				opts.SetRange(rg[0], rg[0]+rg[1]-1)
			} else {
				opts.SetRange(rg[0], 0)
			}
			rc, info, _, err := core.GetObject(ctx, b, pfx+"e-f", opts)
			var data []byte
			if err == nil {
				data, err = io.ReadAll(rc)
				rc.Close()
			}
			fmt.Printf("  range %v: %q size=%d err=%v %#v\n", rg, data, info.Size, err, minio.ToErrorResponse(err).Code)
		}
		_, _, _, err = core.GetObject(ctx, b, pfx+"missing", minio.GetObjectOptions{})
		fmt.Printf("  missing: %v %#v\n", err, minio.ToErrorResponse(err))
		err = c.RemoveObject(ctx, b, pfx+"missing", minio.RemoveObjectOptions{})
		fmt.Printf("  rm missing: %v\n", err)
		err = c.RemoveObject(ctx, b, pfx+"e", minio.RemoveObjectOptions{})
		fmt.Printf("  rm dir e: %v\n", err)
		_, err = c.StatObject(ctx, b, pfx+"e", minio.StatObjectOptions{})
		fmt.Printf("  stat dir e: %v\n", err)
		_, err = c.StatObject(ctx, b, pfx+"dir/", minio.StatObjectOptions{})
		fmt.Printf("  stat dir/: %v\n", err)
		ok, err := c.BucketExists(ctx, "nope")
		fmt.Printf("  bucket nope: %v %v\n", ok, err)
	}
}

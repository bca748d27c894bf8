package commitlog_test

import (
	"testing"

	"github.com/sluice-io/sluice/commitlog"
)

// TestRetune: a log opened to keep everything in one big segment rolls and
// trims by the options it is retuned to, and refuses options that cannot work.
func TestRetune(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{RetentionAge: -1})
	defer l.Close()
	append150 := func() {
		for range 150 {
			if _, err := l.Append(batch(t, "s", 5, 1767225600000), 0); err != nil {
				t.Fatal(err)
			}
		}
		commit(l)
	}
	append150()
	if n, err := l.ApplyRetention(); err != nil || n != 0 {
		t.Fatalf("retention before retuning deleted %d segments: %v", n, err)
	}
	if err := l.Retune(commitlog.Options{SegmentBytes: 100}); err == nil {
		t.Fatal("segment bytes of 100 accepted")
	}
	if err := l.Retune(commitlog.Options{SegmentBytes: 2048, RetentionBytes: 5000, RetentionAge: -1}); err != nil {
		t.Fatal(err)
	}
	append150() // rolls 2 KiB segments from here on
	n, err := l.ApplyRetention()
	if err != nil || n == 0 {
		t.Fatalf("retention after retuning deleted %d segments: %v", n, err)
	}
	if o := l.Offsets(); o.LogStart <= 750 || o.LogEnd != 1500 {
		t.Fatalf("offsets %+v: want the first segment and the oldest small ones gone", o)
	}
}

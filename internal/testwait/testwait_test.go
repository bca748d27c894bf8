package testwait

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	err := Until(time.Minute, func() error {
		if n++; n < 3 {
			return fmt.Errorf("try %d", n)
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Until = %v after %d tries, want nil after 3", err, n)
	}
}

func TestUntilReportsTheLastError(t *testing.T) {
	n := 0
	err := Until(20*time.Millisecond, func() error {
		n++
		return fmt.Errorf("try %d", n)
	})
	if err == nil || err.Error() != fmt.Sprintf("try %d", n) {
		t.Fatalf("Until = %v after %d tries, want the last try's error", err, n)
	}
}

// fakeT records a Fatalf instead of stopping the goroutine.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestCheckFailsWithWhatAndTheLastError(t *testing.T) {
	ft := &fakeT{TB: t}
	Check(ft, 10*time.Millisecond, "the ISR to shrink", func() error { return errors.New("isr [1 2 3], want [1]") })
	want := "waiting for the ISR to shrink: isr [1 2 3], want [1]"
	if !strings.Contains(ft.msg, want) {
		t.Fatalf("Check failed with %q, want it to contain %q", ft.msg, want)
	}
	ft.msg = ""
	Check(ft, time.Second, "nothing", func() error { return nil })
	if ft.msg != "" {
		t.Fatalf("Check failed with %q on a condition that holds", ft.msg)
	}
}

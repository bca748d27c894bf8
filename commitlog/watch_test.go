package commitlog_test

import (
	"testing"

	"github.com/sluice-io/sluice/commitlog"
)

// TestWatcherMoves: a Watcher wakes for the moves it waits for (an append
// for a follower's, an HW move for a consumer's), and every Watcher for a
// truncation and a close. The wake-up is sent before the change returns.
func TestWatcherMoves(t *testing.T) {
	l := openLog(t, osFS(t, t.TempDir()), commitlog.Options{})
	end, hw, anyMove := commitlog.NewWatcher(commitlog.EndMoves), commitlog.NewWatcher(commitlog.HWMoves), commitlog.NewWatcher(commitlog.AnyMoves)
	for _, w := range []*commitlog.Watcher{end, hw, anyMove} {
		l.Watch(w)
	}
	woken := func(w *commitlog.Watcher) bool {
		select {
		case <-w.C():
			return true
		default:
			return false
		}
	}
	steps := []struct {
		name              string
		change            func() error
		end, hw, anyMoves bool
	}{
		{"append", func() error { _, err := l.Append(batch(t, "a", 3, 1), 0); return err }, true, false, true},
		{"HW move", func() error { l.SetHighWatermark(2); return nil }, false, true, true},
		{"HW unchanged", func() error { l.SetHighWatermark(2); return nil }, false, false, false},
		{"truncation", func() error { _, err := l.TruncateTo(2); return err }, true, true, true},
		{"close", l.Close, true, true, true},
	}
	for _, st := range steps {
		if err := st.change(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := [3]bool{woken(end), woken(hw), woken(anyMove)}; got != [3]bool{st.end, st.hw, st.anyMoves} {
			t.Fatalf("%s woke (end, HW, any) = %v, want %v", st.name, got, [3]bool{st.end, st.hw, st.anyMoves})
		}
	}
}

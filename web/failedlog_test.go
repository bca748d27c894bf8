package web_test

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/api"
	"github.com/sluice-io/sluice/broker"
	"github.com/sluice-io/sluice/commitlog/faultfs"
	"github.com/sluice-io/sluice/internal/embedtest"
	"github.com/sluice-io/sluice/internal/testwait"
)

// A replica whose log failed shows on the dashboard: its broker's row on
// the overview says how many logs failed, and the topic page marks the
// replica offline with the disk error.
func TestDashboardShowsFailedLog(t *testing.T) {
	b := newBrowser(t)
	var ffs *faultfs.FS
	c := embedtest.Start(t, embedtest.Options{Brokers: 3, ReplicaLagTimeMax: time.Minute,
		TuneBroker: func(id int, o *broker.Options) {
			if id != 1 {
				return
			}
			ffs = embedtest.FaultFS(t, o)
			o.FailedLogRecheck = time.Hour // stays failed for the test
		}})
	a := apiClient{t: t, base: c.URL}
	a.must(http.MethodPost, "/v1/topics", api.CreateTopicRequest{Name: "disk", Partitions: 1, ReplicationFactor: 3}, nil)
	testwait.Check(t, 20*time.Second, "disk/0 fully replicated", func() error {
		if p := a.topic("disk").Partitions[0]; len(p.ISR) != 3 {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	ffs.FailNextWrite(syscall.ENOSPC)
	// A record for every replica to write: broker 1's write fails, leading
	// or following.
	_ = a.do(http.MethodPost, "/v1/topics/disk/records?acks=all", map[string]any{"records": []map[string]any{{"value": "x"}}}, nil) // its answer depends on which replica broker 1 is
	var failedErr string
	testwait.Check(t, 20*time.Second, "broker 1's replica of disk/0 offline", func() error {
		for _, o := range a.topic("disk").Partitions[0].OfflineReplicas {
			if o.Broker == 1 && o.Reason == api.ReasonStorageError {
				failedErr = o.Error
				return nil
			}
		}
		return fmt.Errorf("%+v", a.topic("disk").Partitions[0])
	})

	tb := b.open(t, c.URL+"/ui/", 1280, 900)
	tb.waitFor(20*time.Second, `(() => { const s = document.querySelector('#brokers tr[data-broker="1"] [data-field=status]');
		return !!s && s.textContent.includes('1 failed log'); })()`, "broker 1's row saying 1 failed log")
	if title := eval[string](tb, `document.querySelector('#brokers tr[data-broker="1"] [data-field=status] .badge.bad').title`); title != "disk/0: "+failedErr {
		t.Errorf("broker 1's failed-log badge title %q, want %q", title, "disk/0: "+failedErr)
	}
	for _, id := range []int{2, 3} {
		if got := eval[string](tb, fmt.Sprintf(`document.querySelector('#brokers tr[data-broker="%d"] [data-field=status]').textContent`, id)); got != "alive" {
			t.Errorf("broker %d's status %q, want alive", id, got)
		}
	}
	tb.screenshot("overview-failed-log")

	tp := b.open(t, c.URL+"/ui/#/topics/disk", 1280, 900)
	tp.waitFor(20*time.Second, `!!document.querySelector('#partitions-table tr[data-partition="0"] [data-failed="1"]')`, "replica 1 of disk/0 marked failed")
	if title := eval[string](tp, `document.querySelector('#partitions-table tr[data-partition="0"] [data-failed="1"]').title`); title != "broker 1: offline, its log failed: "+failedErr {
		t.Errorf("replica 1's badge title %q", title)
	}
	if n := eval[int](tp, `document.querySelectorAll('#partitions-table tr[data-partition="0"] [data-failed]').length`); n != 1 {
		t.Errorf("%d replicas of disk/0 marked failed, want 1", n)
	}
	tp.screenshot("topic-failed-log")
}

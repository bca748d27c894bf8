package replica

import (
	"fmt"
	"testing"
	"time"
)

func TestHighWatermarkIsMinLEOOverISR(t *testing.T) {
	now := time.Unix(1000, 0)
	p := NewProgress(1, []int32{1, 2, 3}, []int32{1, 2, 3}, now)
	if _, known := p.HighWatermark(10); known {
		t.Fatal("HW known before any follower fetched")
	}
	p.OnFetch(2, 7, 10, now)
	if _, known := p.HighWatermark(10); known {
		t.Fatal("HW known while ISR member 3 has not fetched")
	}
	p.OnFetch(3, 9, 10, now)
	if hw, _ := p.HighWatermark(10); hw != 7 {
		t.Fatalf("hw %d, want 7", hw)
	}
	p.SetISR([]int32{1, 3})
	if hw, _ := p.HighWatermark(10); hw != 9 {
		t.Fatalf("hw after shrink %d, want 9", hw)
	}
	p.SetISR([]int32{1})
	if hw, _ := p.HighWatermark(10); hw != 10 {
		t.Fatalf("hw with the leader alone %d, want its LEO", hw)
	}
}

func TestLaggardsAndJoiners(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := NewProgress(1, []int32{1, 2, 3}, []int32{1, 2, 3}, t0)
	lag := 10 * time.Second
	// Follower 2 keeps up; follower 3 fetches but stays behind.
	for i := int64(1); i <= 20; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		leo := 100 * i
		p.OnFetch(2, leo, leo, now)
		p.OnFetch(3, 5, leo, now)
	}
	now := t0.Add(20 * time.Second)
	if got := fmt.Sprint(p.Laggards(now, lag)); got != "[3]" {
		t.Fatalf("laggards %s, want [3]", got)
	}
	p.SetISR([]int32{1, 2})
	if got := p.Joiners(2000, 0, now.Add(2*time.Second), lag); len(got) != 0 {
		t.Fatalf("joiners %v while 3 is behind", got)
	}
	// A follower that fetches at the leader's LEO as of its previous fetch
	// counts as caught up at that previous fetch (Kafka's rule).
	p.OnFetch(3, 2000, 2100, now.Add(time.Second))
	p.OnFetch(3, 2100, 2200, now.Add(2*time.Second))
	if f := p.Follower(3); !f.LastCaughtUp.Equal(now.Add(time.Second)) {
		t.Fatalf("last caught up %v", f.LastCaughtUp)
	}
	if got := fmt.Sprint(p.Joiners(2000, 0, now.Add(2*time.Second), lag)); got != "[3]" {
		t.Fatalf("joiners %s, want [3]", got)
	}
	if got := p.Joiners(2000, 2500, now.Add(2*time.Second), lag); len(got) != 0 {
		t.Fatalf("a follower below the epoch start joined: %v", got)
	}
	// A follower that stopped fetching does not rejoin, however far it got.
	if got := p.Joiners(2000, 0, now.Add(time.Minute), lag); len(got) != 0 {
		t.Fatalf("a silent follower joined: %v", got)
	}
}

package tier

import "testing"

func TestMemoryAcceptance(t *testing.T) {
	bkt := NewMemory()
	t.Cleanup(func() { bkt.Close() })
	AcceptanceTest(t, bkt)
}

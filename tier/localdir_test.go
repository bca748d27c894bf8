package tier

import "testing"

func TestLocalDirAcceptance(t *testing.T) {
	bkt, err := OpenLocalDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bkt.Close() })
	AcceptanceTest(t, bkt)
}

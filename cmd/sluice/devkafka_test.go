package main

import "testing"

func TestKafkaAddrs(t *testing.T) {
	at, err := kafkaAddrs("127.0.0.1:9092", 3)
	if err != nil || at(1) != "127.0.0.1:9092" || at(2) != "127.0.0.1:9093" || at(3) != "127.0.0.1:9094" {
		t.Fatalf("%v %q %q %q", err, at(1), at(2), at(3))
	}
	at, err = kafkaAddrs("[::1]:0", 3)
	if err != nil || at(2) != "[::1]:0" {
		t.Fatalf("%v %q", err, at(2))
	}
	at, err = kafkaAddrs("", 3)
	if err != nil || at(1) != "" {
		t.Fatalf("%v %q", err, at(1))
	}
	for _, bad := range []string{"9092", "host:port", "h:-1", "h:65534"} {
		if _, err := kafkaAddrs(bad, 3); err == nil {
			t.Errorf("%q taken", bad)
		}
	}
}

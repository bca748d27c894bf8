package api

import "testing"

// TestMurmur2 uses the vectors from Kafka's UtilsTest.testMurmur2, so keys hash
// as they do in Kafka's producer.
func TestMurmur2(t *testing.T) {
	tests := []struct {
		key  string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
		{"", 275646681},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := Murmur2([]byte(tt.key)); got != tt.want {
				t.Fatalf("Murmur2(%q) = %d, want %d", tt.key, got, tt.want)
			}
		})
	}
}

func TestKeyPartition(t *testing.T) {
	tests := []struct {
		name string
		key  string
		n    int
		want int
	}{
		// toPositive(-790332482) = 1357151166, not |-790332482|.
		{"negative hash clears the sign bit", "foobar", 10, 1357151166 % 10},
		{"positive hash", "abc", 7, 479470107 % 7},
		{"one partition", "21", 1, 0},
		{"many partitions", "a-little-bit-long-string", 1000, (-985981536 & 0x7fffffff) % 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KeyPartition([]byte(tt.key), tt.n); got != tt.want {
				t.Fatalf("KeyPartition(%q, %d) = %d, want %d", tt.key, tt.n, got, tt.want)
			}
		})
	}
	t.Run("zero partitions panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		KeyPartition([]byte("k"), 0)
	})
}

func BenchmarkMurmur2(b *testing.B) {
	key := []byte("user-1234567890-session")
	b.SetBytes(int64(len(key)))
	for b.Loop() {
		Murmur2(key)
	}
}

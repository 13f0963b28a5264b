package fleet

import (
	"testing"
	"time"
)

// TestPeakOverlap: the queue's peak lag is the most orders accepted and not
// yet written at one instant, from their timestamps.
func TestPeakOverlap(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name  string
		spans []span
		want  int
	}{
		{"none", nil, 0},
		{"one after another", []span{{at(0), at(10)}, {at(10), at(20)}, {at(20), at(30)}}, 1},
		{"three at once, then one", []span{{at(0), at(50)}, {at(5), at(40)}, {at(10), at(30)}, {at(45), at(60)}}, 3},
		{"written the instant accepted: never waited", []span{{at(5), at(5)}, {at(5), at(5)}}, 0},
	} {
		if got := peakOverlap(c.spans); got != c.want {
			t.Errorf("%s: peak %d, want %d", c.name, got, c.want)
		}
	}
}

package inventory_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// TestScriptGateFoldsOnlyIntoItsOwnServer: a gate runs inside a claim's
// script only on its own client of one server; on another client, or on
// a Cluster (whose slots the gate's keys ignore), it keeps its round trip.
func TestScriptGateFoldsOnlyIntoItsOwnServer(t *testing.T) {
	one := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	other := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _, _, _ = one.Close(), other.Close(), cluster.Close() })
	for _, c := range []struct {
		name        string
		gate, claim redis.UniversalClient
		want        bool
	}{
		{"same client, one server", one, one, true},
		{"another client", one, other, false},
		{"a Cluster", cluster, cluster, false},
	} {
		if got := (inventory.ScriptGate{Client: c.gate}).FoldsInto(c.claim); got != c.want {
			t.Errorf("%s: FoldsInto = %v, want %v", c.name, got, c.want)
		}
	}
}

package httpapi

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

// TestClientAddrBelievesOnlyTrustedProxies: X-Forwarded-For names the
// client only when the peer is a trusted proxy, and then its rightmost hop
// that is not itself a trusted proxy; a client that forges the header
// directly, or prepends a fake hop through the proxy, is still seen as
// itself.
func TestClientAddrBelievesOnlyTrustedProxies(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	cases := []struct {
		name, peer, xff, want string
		trusted               []netip.Prefix
	}{
		{"no proxies configured", "203.0.113.7:5000", "198.51.100.1", "203.0.113.7", nil},
		{"forged by a direct client", "203.0.113.7:5000", "198.51.100.1", "203.0.113.7", trusted},
		{"through the proxy", "10.1.2.3:80", "198.51.100.1", "198.51.100.1", trusted},
		{"a fake hop prepended through the proxy", "10.1.2.3:80", "192.0.2.66, 198.51.100.1", "198.51.100.1", trusted},
		{"two trusted proxies", "10.1.2.3:80", "198.51.100.1, 10.9.9.9", "198.51.100.1", trusted},
		{"proxy without the header", "10.1.2.3:80", "", "10.1.2.3", trusted},
		{"IPv6 loopback proxy", "[::1]:80", "2001:db8::5", "2001:db8::5", trusted},
		{"only trusted hops", "10.1.2.3:80", "10.0.0.1, 10.0.0.2", "10.0.0.1", trusted},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := clientAddr(r, tc.trusted); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

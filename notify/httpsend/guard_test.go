package httpsend

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGuardCheck(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		addr   string
		allow  []string
		reason string // "" when allowed
	}{
		{addr: "127.0.0.1", reason: "loopback"},
		{addr: "127.9.9.9", reason: "loopback"},
		{addr: "::1", reason: "loopback"},
		{addr: "::ffff:127.0.0.1", reason: "loopback"},
		{addr: "0.0.0.0", reason: "unspecified"},
		{addr: "::", reason: "unspecified"},
		{addr: "0.1.2.3", reason: "this-network"},
		{addr: "10.1.2.3", reason: "private"},
		{addr: "172.16.0.1", reason: "private"},
		{addr: "172.31.255.254", reason: "private"},
		{addr: "192.168.1.1", reason: "private"},
		{addr: "fd00::1", reason: "private"},
		{addr: "169.254.169.254", reason: "link-local"},
		{addr: "fe80::1", reason: "link-local"},
		{addr: "fe80::1%eth0", reason: "link-local"},
		{addr: "224.0.0.1", reason: "multicast"},
		{addr: "ff02::1", reason: "multicast"},
		{addr: "100.64.0.1", reason: "carrier-grade NAT"},
		{addr: "100.127.255.254", reason: "carrier-grade NAT"},
		{addr: "255.255.255.255", reason: "reserved"},
		{addr: "172.32.0.1"},
		{addr: "100.128.0.1"},
		{addr: "192.0.2.1"},
		{addr: "2001:db8::1"},
		{addr: "10.1.2.3", allow: []string{"10.0.0.0/8"}},
		{addr: "127.0.0.1", allow: []string{"10.0.0.0/8"}, reason: "loopback"},
		{addr: "127.0.0.1", allow: []string{"127.0.0.1"}},
		{addr: "::ffff:127.0.0.1", allow: []string{"127.0.0.0/8"}},
		{addr: "0.0.0.0", allow: []string{"0.0.0.0/32"}},
		{addr: "::1", allow: []string{"::1/128"}},
	} {
		allow, err := ParsePrefixes(tt.allow)
		require.NoError(t, err)
		err = NewGuard(allow, nil, nil).Check("host", netip.MustParseAddr(tt.addr))
		if tt.reason == "" {
			require.NoError(t, err, "%s allow %v", tt.addr, tt.allow)
			continue
		}
		var blocked *BlockedError
		require.ErrorAs(t, err, &blocked, "%s allow %v", tt.addr, tt.allow)
		require.Equal(t, tt.reason, blocked.Reason, tt.addr)
	}
}

func TestParsePrefixes(t *testing.T) {
	t.Parallel()

	got, err := ParsePrefixes([]string{"127.0.0.0/8", " 10.1.2.3/8 ", "::1", "fd00::/8"})
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("::1/128"),
		netip.MustParsePrefix("fd00::/8"),
	}, got)

	_, err = ParsePrefixes([]string{"127.0.0.0/8", "localhost"})
	require.EqualError(t, err, `allow_networks[1]: "localhost" is not a CIDR such as 127.0.0.0/8`)
}

// dialRecorder is a DialFunc that records what it was asked to dial and
// never touches the network.
type dialRecorder struct {
	mu     sync.Mutex
	dialed []string
}

func (d *dialRecorder) dial(_ context.Context, _, address string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dialed = append(d.dialed, address)
	client, server := net.Pipe()
	server.Close()
	return client, nil
}

func TestGuardDialContext(t *testing.T) {
	t.Parallel()

	resolver := ResolverFunc(func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "internal.test":
			return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
		case "mixed.test":
			return []netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("192.0.2.10")}, nil
		case "empty.test":
			return nil, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})

	type testBundle struct {
		guard *Guard
		rec   *dialRecorder
	}
	setup := func(t *testing.T, allow ...string) *testBundle {
		t.Helper()
		prefixes, err := ParsePrefixes(allow)
		require.NoError(t, err)
		rec := &dialRecorder{}
		return &testBundle{guard: NewGuard(prefixes, resolver, rec.dial), rec: rec}
	}

	t.Run("RefusedBeforeDialing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		_, err := bundle.guard.DialContext(context.Background(), "tcp", "internal.test:443")
		var blocked *BlockedError
		require.ErrorAs(t, err, &blocked)
		require.EqualError(t, err, "ssrf guard: internal.test resolves to 10.0.0.7, a private address; allow_networks can let it through")
		require.Empty(t, bundle.rec.dialed)
	})

	t.Run("LiteralSkipsResolver", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		_, err := bundle.guard.DialContext(context.Background(), "tcp", "[::1]:80")
		require.EqualError(t, err, "ssrf guard: ::1 is a loopback address; allow_networks can let it through")
		require.Empty(t, bundle.rec.dialed)
	})

	t.Run("DialsOnlyAcceptableAddresses", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		conn, err := bundle.guard.DialContext(context.Background(), "tcp", "mixed.test:80")
		require.NoError(t, err)
		conn.Close()
		require.Equal(t, []string{"192.0.2.10:80"}, bundle.rec.dialed)
	})

	t.Run("AllowedNetwork", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, "10.0.0.0/8")
		conn, err := bundle.guard.DialContext(context.Background(), "tcp", "internal.test:8080")
		require.NoError(t, err)
		conn.Close()
		require.Equal(t, []string{"10.0.0.7:8080"}, bundle.rec.dialed)
	})

	t.Run("UnknownHost", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, host := range []string{"nowhere.test:80", "empty.test:80"} {
			_, err := bundle.guard.DialContext(context.Background(), "tcp", host)
			var dnsErr *net.DNSError
			require.ErrorAs(t, err, &dnsErr, host)
			require.True(t, dnsErr.IsNotFound)
		}
		require.Empty(t, bundle.rec.dialed)
	})

	t.Run("ConnectionErrorOutranksRefusal", func(t *testing.T) {
		t.Parallel()
		refused := errors.New("connection refused")
		guard := NewGuard(nil, resolver, func(context.Context, string, string) (net.Conn, error) { return nil, refused })
		_, err := guard.DialContext(context.Background(), "tcp", "mixed.test:80")
		require.ErrorIs(t, err, refused)
	})
}

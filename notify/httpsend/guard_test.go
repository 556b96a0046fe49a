package httpsend

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

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
		{addr: "255.255.255.255", reason: "broadcast"},
		{addr: "172.32.0.1"},
		{addr: "100.128.0.1"},
		{addr: "192.0.2.1", reason: "documentation"},
		{addr: "8.8.8.8"},
		{addr: "2001:db8::1", reason: "documentation"},
		{addr: "64:ff9b::7f00:1", reason: "loopback (127.0.0.1 embedded in NAT64)"},
		{addr: "2606:4700:4700::1111"},
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
			return []netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("8.8.4.4")}, nil
		case "dual.test":
			return []netip.Addr{netip.MustParseAddr("2606:4700:4700::1111"), netip.MustParseAddr("8.8.4.4")}, nil
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
		require.Equal(t, []string{"8.8.4.4:80"}, bundle.rec.dialed)
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

	// A name whose first address never answers (an AAAA record with a
	// broken IPv6 route) still reaches its next one within the attempt's
	// timeout, as net.Dialer shares the time out between a name's
	// addresses.
	t.Run("UnansweringAddressLeavesTimeForTheNext", func(t *testing.T) {
		t.Parallel()
		rec := &dialRecorder{}
		guard := NewGuard(nil, resolver, func(ctx context.Context, network, address string) (net.Conn, error) {
			if strings.HasPrefix(address, "[") {
				<-ctx.Done()
				return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
			}
			return rec.dial(ctx, network, address)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 4500*time.Millisecond)
		defer cancel()
		conn, err := guard.DialContext(ctx, "tcp", "dual.test:443")
		require.NoError(t, err)
		conn.Close()
		require.Equal(t, []string{"8.8.4.4:443"}, rec.dialed)
	})

	t.Run("ConnectionErrorOutranksRefusal", func(t *testing.T) {
		t.Parallel()
		refused := errors.New("connection refused")
		guard := NewGuard(nil, resolver, func(context.Context, string, string) (net.Conn, error) { return nil, refused })
		_, err := guard.DialContext(context.Background(), "tcp", "mixed.test:80")
		require.ErrorIs(t, err, refused)
	})
}

// TestGuardRefusesSpecialPurpose resolves a name to one address of every
// block of the IANA IPv4 and IPv6 special-purpose address registries that is
// not globally reachable, and to addresses that embed an internal IPv4
// address (NAT64, 6to4, Teredo, IPv4-compatible, SIIT, mapped): each is
// refused before anything is dialled.
func TestGuardRefusesSpecialPurpose(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name string
		addr string
	}{
		// IPv4 special-purpose registry.
		{name: "ThisNetwork", addr: "0.1.2.3"},
		{name: "ThisHost", addr: "0.0.0.0"},
		{name: "Private10", addr: "10.1.2.3"},
		{name: "SharedAddressSpace", addr: "100.64.0.1"},
		{name: "Loopback", addr: "127.0.0.1"},
		{name: "LinkLocal", addr: "169.254.169.254"},
		{name: "Private172", addr: "172.16.0.1"},
		{name: "IETFProtocolAssignments", addr: "192.0.0.1"},
		{name: "ServiceContinuity", addr: "192.0.0.6"},
		{name: "DummyAddress", addr: "192.0.0.8"},
		{name: "NAT64Discovery", addr: "192.0.0.170"},
		{name: "Documentation1", addr: "192.0.2.1"},
		{name: "Deprecated6to4Relay", addr: "192.88.99.1"},
		{name: "Private192", addr: "192.168.1.1"},
		{name: "Benchmarking", addr: "198.18.0.1"},
		{name: "BenchmarkingUpper", addr: "198.19.255.254"},
		{name: "Documentation2", addr: "198.51.100.7"},
		{name: "Documentation3", addr: "203.0.113.9"},
		{name: "Reserved", addr: "240.0.0.1"},
		{name: "LimitedBroadcast", addr: "255.255.255.255"},
		{name: "Multicast", addr: "224.0.0.1"},
		// IPv6 special-purpose registry.
		{name: "LoopbackIPv6", addr: "::1"},
		{name: "UnspecifiedIPv6", addr: "::"},
		{name: "IPv4MappedLoopback", addr: "::ffff:127.0.0.1"},
		{name: "IPv4MappedMetadata", addr: "::ffff:169.254.169.254"},
		{name: "NAT64LocalUse", addr: "64:ff9b:1::1"},
		{name: "NAT64LocalUsePublic", addr: "64:ff9b:1::808:808"},
		{name: "DiscardOnly", addr: "100::1"},
		{name: "DummyIPv6Prefix", addr: "100:0:0:1::1"},
		{name: "IETFProtocolAssignmentsIPv6", addr: "2001:0:1::1"},
		{name: "Teredo", addr: "2001:0:4136:e378:8000:63bf:3fff:fdd2"},
		{name: "BenchmarkingIPv6", addr: "2001:2::1"},
		{name: "ORCHIDDeprecated", addr: "2001:10::1"},
		{name: "DocumentationIPv6", addr: "2001:db8::1"},
		{name: "DocumentationIPv6New", addr: "3fff::1"},
		{name: "SixToFour", addr: "2002:c000:0201::1"},
		{name: "SRv6SIDs", addr: "5f00::1"},
		{name: "UniqueLocal", addr: "fd00::1"},
		{name: "LinkLocalIPv6", addr: "fe80::1"},
		{name: "SiteLocal", addr: "fec0::1"},
		{name: "MulticastIPv6", addr: "ff02::1"},
		// Addresses that embed an internal IPv4 address.
		{name: "NAT64Loopback", addr: "64:ff9b::127.0.0.1"},
		{name: "NAT64Metadata", addr: "64:ff9b::169.254.169.254"},
		{name: "NAT64Private", addr: "64:ff9b::10.0.0.1"},
		{name: "SixToFourLoopback", addr: "2002:7f00:1::"},
		{name: "SixToFourMetadata", addr: "2002:a9fe:a9fe::1"},
		{name: "TeredoLoopbackClient", addr: "2001:0:4136:e378:8000:63bf:80ff:fffe"},
		{name: "IPv4CompatibleLoopback", addr: "::127.0.0.1"},
		{name: "IPv4CompatiblePublic", addr: "::8.8.8.8"},
		{name: "SIITLoopback", addr: "::ffff:0:127.0.0.1"},
		{name: "SIITPublic", addr: "::ffff:0:8.8.8.8"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr := netip.MustParseAddr(tt.addr)
			resolver := ResolverFunc(func(context.Context, string, string) ([]netip.Addr, error) {
				return []netip.Addr{addr}, nil
			})
			rec := &dialRecorder{}
			guard := NewGuard(nil, resolver, rec.dial)
			for _, target := range []string{"internal.test:443", net.JoinHostPort(tt.addr, "443")} {
				_, err := guard.DialContext(context.Background(), "tcp", target)
				var blocked *BlockedError
				require.ErrorAs(t, err, &blocked, "%s (%s) was let through", target, tt.addr)
			}
			require.Empty(t, rec.dialed, "a refused address was dialled")
		})
	}
}

// TestGuardLetsGlobalAddressesThrough checks the other side of
// TestGuardRefusesSpecialPurpose: globally reachable addresses, the
// registry's globally reachable exceptions inside refused blocks, NAT64 of a
// public address, and internal networks that allow_networks names.
func TestGuardLetsGlobalAddressesThrough(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name  string
		addr  string
		allow []string
	}{
		{name: "PublicIPv4", addr: "8.8.8.8"},
		{name: "PublicIPv6", addr: "2606:4700:4700::1111"},
		{name: "MappedPublic", addr: "::ffff:8.8.8.8"},
		{name: "PCPAnycast", addr: "192.0.0.9"},
		{name: "TURNAnycast", addr: "192.0.0.10"},
		{name: "AS112", addr: "192.31.196.1"},
		{name: "AMTIPv6", addr: "2001:3::1"},
		{name: "NAT64Public", addr: "64:ff9b::8.8.8.8"},
		{name: "AllowedPrivate", addr: "10.1.2.3", allow: []string{"10.0.0.0/8"}},
		{name: "AllowedBenchmarking", addr: "198.18.0.1", allow: []string{"198.18.0.0/15"}},
		{name: "AllowedNAT64Private", addr: "64:ff9b::10.0.0.1", allow: []string{"10.0.0.0/8"}},
		{name: "AllowedSixToFour", addr: "2002:7f00:1::", allow: []string{"2002::/16", "127.0.0.0/8"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			allow, err := ParsePrefixes(tt.allow)
			require.NoError(t, err)
			rec := &dialRecorder{}
			guard := NewGuard(allow, nil, rec.dial)
			conn, err := guard.DialContext(context.Background(), "tcp", net.JoinHostPort(tt.addr, "443"))
			require.NoError(t, err)
			conn.Close()
			require.Equal(t, []string{net.JoinHostPort(netip.MustParseAddr(tt.addr).Unmap().String(), "443")}, rec.dialed)
		})
	}
}

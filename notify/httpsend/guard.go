package httpsend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Resolver looks up the addresses of a host name. *net.Resolver satisfies it;
// tests inject one so that no name is looked up outside the machine.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

// LookupNetIP calls f.
func (f ResolverFunc) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return f(ctx, network, host)
}

var _ Resolver = ResolverFunc(nil)

// DialFunc opens a connection to address, always an IP literal and a port
// once the guard has checked it. The default is a net.Dialer's DialContext.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// specialNetwork is one entry of the refused set: a block and whether its
// addresses are globally reachable. An address takes the entry of the most
// specific block that holds it, so that a globally reachable exception
// (192.0.0.9/32 inside 192.0.0.0/24) lets its addresses through.
type specialNetwork struct {
	prefix netip.Prefix
	reason string
	global bool
}

// specialNetworks is every block of the IANA IPv4 and IPv6 Special-Purpose
// Address Registries (RFC 6890, as updated to 2025), plus multicast,
// site-local and the embedding forms the registries do not list. A block
// whose "Globally Reachable" is False or N/A is refused; the True entries
// are the exceptions inside refused blocks. IPv6 outside 2000::/3, which the
// IANA address space registry leaves unassigned or special, is refused as
// well (see blockedReason), so these IPv6 entries mostly name the reason.
var specialNetworks = []specialNetwork{
	// IPv4.
	{prefix: netip.MustParsePrefix("0.0.0.0/8"), reason: "this-network"},
	{prefix: netip.MustParsePrefix("0.0.0.0/32"), reason: "unspecified"},
	{prefix: netip.MustParsePrefix("10.0.0.0/8"), reason: "private"},
	{prefix: netip.MustParsePrefix("100.64.0.0/10"), reason: "carrier-grade NAT"},
	{prefix: netip.MustParsePrefix("127.0.0.0/8"), reason: "loopback"},
	{prefix: netip.MustParsePrefix("169.254.0.0/16"), reason: "link-local"},
	{prefix: netip.MustParsePrefix("172.16.0.0/12"), reason: "private"},
	{prefix: netip.MustParsePrefix("192.0.0.0/24"), reason: "IETF protocol assignment"},
	{prefix: netip.MustParsePrefix("192.0.0.9/32"), reason: "PCP anycast", global: true},
	{prefix: netip.MustParsePrefix("192.0.0.10/32"), reason: "TURN anycast", global: true},
	{prefix: netip.MustParsePrefix("192.0.2.0/24"), reason: "documentation"},
	{prefix: netip.MustParsePrefix("192.88.99.0/24"), reason: "deprecated 6to4 relay"},
	{prefix: netip.MustParsePrefix("192.168.0.0/16"), reason: "private"},
	{prefix: netip.MustParsePrefix("198.18.0.0/15"), reason: "benchmarking"},
	{prefix: netip.MustParsePrefix("198.51.100.0/24"), reason: "documentation"},
	{prefix: netip.MustParsePrefix("203.0.113.0/24"), reason: "documentation"},
	{prefix: netip.MustParsePrefix("224.0.0.0/4"), reason: "multicast"},
	{prefix: netip.MustParsePrefix("240.0.0.0/4"), reason: "reserved"},
	{prefix: netip.MustParsePrefix("255.255.255.255/32"), reason: "broadcast"},
	// IPv6.
	{prefix: netip.MustParsePrefix("::/128"), reason: "unspecified"},
	{prefix: netip.MustParsePrefix("::1/128"), reason: "loopback"},
	{prefix: netip.MustParsePrefix("::/96"), reason: "IPv4-compatible"},
	{prefix: netip.MustParsePrefix("::ffff:0:0:0/96"), reason: "SIIT IPv4-translated"},
	{prefix: netip.MustParsePrefix("64:ff9b::/96"), reason: "NAT64", global: true},
	{prefix: netip.MustParsePrefix("64:ff9b:1::/48"), reason: "local-use NAT64"},
	{prefix: netip.MustParsePrefix("100::/64"), reason: "discard-only"},
	{prefix: netip.MustParsePrefix("100:0:0:1::/64"), reason: "dummy"},
	{prefix: netip.MustParsePrefix("2001::/23"), reason: "IETF protocol assignment"},
	{prefix: netip.MustParsePrefix("2001::/32"), reason: "Teredo"},
	{prefix: netip.MustParsePrefix("2001:1::1/128"), reason: "PCP anycast", global: true},
	{prefix: netip.MustParsePrefix("2001:1::2/128"), reason: "TURN anycast", global: true},
	{prefix: netip.MustParsePrefix("2001:1::3/128"), reason: "DNS-SD SRP anycast", global: true},
	{prefix: netip.MustParsePrefix("2001:2::/48"), reason: "benchmarking"},
	{prefix: netip.MustParsePrefix("2001:3::/32"), reason: "AMT", global: true},
	{prefix: netip.MustParsePrefix("2001:4:112::/48"), reason: "AS112", global: true},
	{prefix: netip.MustParsePrefix("2001:10::/28"), reason: "deprecated ORCHID"},
	{prefix: netip.MustParsePrefix("2001:20::/28"), reason: "ORCHIDv2", global: true},
	{prefix: netip.MustParsePrefix("2001:30::/28"), reason: "drone remote ID", global: true},
	{prefix: netip.MustParsePrefix("2001:db8::/32"), reason: "documentation"},
	{prefix: netip.MustParsePrefix("2002::/16"), reason: "6to4"},
	{prefix: netip.MustParsePrefix("3fff::/20"), reason: "documentation"},
	{prefix: netip.MustParsePrefix("5f00::/16"), reason: "SRv6 SID"},
	{prefix: netip.MustParsePrefix("fc00::/7"), reason: "private"},
	{prefix: netip.MustParsePrefix("fe80::/10"), reason: "link-local"},
	{prefix: netip.MustParsePrefix("fec0::/10"), reason: "site-local"},
	{prefix: netip.MustParsePrefix("ff00::/8"), reason: "multicast"},
}

// globalUnicast is the IPv6 space IANA allocates for global unicast; the
// rest (besides the NAT64 prefix, which specialNetworks lets through) is
// reserved or special.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// BlockedError is the guard's refusal to connect to an address. The senders
// make it a permanent failure: retrying cannot make the address acceptable.
type BlockedError struct {
	// Host is the name the target named, or the address itself.
	Host string
	// Addr is the refused address.
	Addr netip.Addr
	// Reason names the kind of network, such as "loopback" or "private".
	Reason string
}

// Error implements error, naming the address so an operator can tell which
// network to allow.
func (e *BlockedError) Error() string {
	if e.Host != e.Addr.String() {
		return fmt.Sprintf("ssrf guard: %s resolves to %s, a %s address; allow_networks can let it through", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("ssrf guard: %s is a %s address; allow_networks can let it through", e.Addr, e.Reason)
}

// Guard decides, at dial time, which addresses a sender may connect to.
// Checking the resolved address in the dialer, not the URL's host, means a
// name that resolves (or re-resolves) to an internal address is refused too.
type Guard struct {
	allow    []netip.Prefix
	resolver Resolver
	dial     DialFunc
}

// NewGuard returns a guard that lets the allow networks through, resolving
// names with resolver (nil: net.DefaultResolver) and connecting with dial
// (nil: a net.Dialer).
func NewGuard(allow []netip.Prefix, resolver Resolver, dial DialFunc) *Guard {
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if dial == nil {
		dial = (&net.Dialer{KeepAlive: keepAlive}).DialContext
	}
	return &Guard{allow: allow, resolver: resolver, dial: dial}
}

// ParsePrefixes reads CIDRs such as "127.0.0.0/8" or "fd00::/8"; a bare
// address stands for itself alone. The error names the entry, as
// "allow_networks[1]".
func ParsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for i, s := range cidrs {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("allow_networks[%d]: %q is not a CIDR such as 127.0.0.0/8", i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Check returns a *BlockedError when addr is in a refused network that no
// allowed network covers, and nil otherwise. host names the target for the
// error. An IPv4-mapped address is checked as the IPv4 address it is dialled
// as. An address that embeds an IPv4 address (NAT64, 6to4, Teredo,
// IPv4-compatible, SIIT) is refused when the embedded address is, unless an
// allowed network covers that one: a NAT64 gateway would carry the request
// on to it.
func (g *Guard) Check(host string, addr netip.Addr) error {
	addr = addr.Unmap().WithZone("")
	if g.allowed(addr) {
		return nil
	}
	if v4, form, ok := embeddedIPv4(addr); ok && !g.allowed(v4) {
		if reason := blockedReason(v4); reason != "" {
			return &BlockedError{Host: host, Addr: addr, Reason: fmt.Sprintf("%s (%s embedded in %s)", reason, v4, form)}
		}
	}
	if reason := blockedReason(addr); reason != "" {
		return &BlockedError{Host: host, Addr: addr, Reason: reason}
	}
	return nil
}

func (g *Guard) allowed(addr netip.Addr) bool {
	for _, p := range g.allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// blockedReason names the refused network that holds a, or returns "" for
// a globally reachable address.
func blockedReason(a netip.Addr) string {
	var best *specialNetwork
	for i, n := range specialNetworks {
		if n.prefix.Contains(a) && (best == nil || n.prefix.Bits() > best.prefix.Bits()) {
			best = &specialNetworks[i]
		}
	}
	switch {
	case best != nil && !best.global:
		return best.reason
	case best == nil && a.Is6() && !globalUnicast.Contains(a):
		return "reserved"
	}
	return ""
}

// Prefixes whose addresses carry an IPv4 address.
var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")
	nat64LocalPrefix = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")
	teredoPrefix     = netip.MustParsePrefix("2001::/32")
	compatPrefix     = netip.MustParsePrefix("::/96")
	siitPrefix       = netip.MustParsePrefix("::ffff:0:0:0/96")
)

// embeddedIPv4 returns the IPv4 address an IPv6 address carries, and the
// form that carries it: NAT64 (RFC 6052, the low 32 bits; for the local-use
// prefix with a /96 layout, as gateways commonly use), 6to4 (RFC 3056, bits
// 16 to 47), Teredo (RFC 4380, the client's address, the low 32 bits
// inverted), IPv4-compatible (RFC 4291) and SIIT (RFC 2765), both the low 32
// bits. The unspecified and loopback addresses are not IPv4-compatible ones.
func embeddedIPv4(a netip.Addr) (netip.Addr, string, bool) {
	if !a.Is6() {
		return netip.Addr{}, "", false
	}
	b := a.As16()
	low := [4]byte{b[12], b[13], b[14], b[15]}
	switch {
	case nat64Prefix.Contains(a):
		return netip.AddrFrom4(low), "NAT64", true
	case nat64LocalPrefix.Contains(a):
		return netip.AddrFrom4(low), "local-use NAT64", true
	case sixToFourPrefix.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), "6to4", true
	case teredoPrefix.Contains(a):
		return netip.AddrFrom4([4]byte{^low[0], ^low[1], ^low[2], ^low[3]}), "Teredo", true
	case siitPrefix.Contains(a):
		return netip.AddrFrom4(low), "SIIT", true
	case compatPrefix.Contains(a) && a.Compare(netip.IPv6Loopback()) > 0:
		return netip.AddrFrom4(low), "IPv4-compatible", true
	}
	return netip.Addr{}, "", false
}

// DialContext resolves address's host, refuses it when every address it
// resolves to is blocked, and otherwise connects to the first acceptable
// address that answers. As net.Dialer does, the acceptable addresses share
// the time ctx leaves, each getting at least dialShareMinimum, so that one
// that never answers (an AAAA record with a broken route) leaves time for
// the next. It is an http.Transport's DialContext.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	addrs, err := g.resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	var firstErr error
	acceptable := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if err := g.Check(host, a); err != nil {
			firstErr = cmpErr(firstErr, err)
			continue
		}
		acceptable = append(acceptable, a)
	}
	for i, a := range acceptable {
		conn, err := g.dialShare(ctx, network, net.JoinHostPort(a.Unmap().String(), port), len(acceptable)-i)
		if err == nil {
			return conn, nil
		}
		firstErr = cmpErr(firstErr, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// dialShareMinimum is the least time an address gets when a name's
// addresses share the time left, as net.Dialer gives each.
const dialShareMinimum = 2 * time.Second

// dialShare dials address, the first of remaining addresses still to try,
// within its share of the time ctx leaves.
func (g *Guard) dialShare(ctx context.Context, network, address string, remaining int) (net.Conn, error) {
	if dl, ok := ctx.Deadline(); ok && remaining > 1 {
		left := time.Until(dl)
		share := max(left/time.Duration(remaining), min(dialShareMinimum, left))
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, share)
		// Ends only the dialling: a connection made outlives its context.
		defer cancel()
	}
	return g.dial(ctx, network, address)
}

// cmpErr keeps the first error, except that a connection error outranks a
// refusal: when one address was refused and another failed to answer, the
// failure to answer is what may heal on retry.
func cmpErr(first, next error) error {
	var blocked *BlockedError
	if first == nil || (errors.As(first, &blocked) && !errors.As(next, &blocked)) {
		return next
	}
	return first
}

func (g *Guard) resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ipNet := "ip"
	switch network {
	case "tcp4":
		ipNet = "ip4"
	case "tcp6":
		ipNet = "ip6"
	}
	addrs, err := g.resolver.LookupNetIP(ctx, ipNet, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

package httpsend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
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

// blockedNetworks are the networks refused unless allowed, with the reason
// the refusal names. Go's netip predicates cover loopback, private (RFC 1918
// and fc00::/7), link-local, multicast and unspecified; the prefixes add what
// they miss.
var blockedNetworks = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
}

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
// error.
func (g *Guard) Check(host string, addr netip.Addr) error {
	addr = addr.Unmap().WithZone("")
	for _, p := range g.allow {
		if p.Contains(addr) {
			return nil
		}
	}
	if reason := blockedReason(addr); reason != "" {
		return &BlockedError{Host: host, Addr: addr, Reason: reason}
	}
	return nil
}

func blockedReason(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	case a.IsUnspecified():
		return "unspecified"
	}
	for _, b := range blockedNetworks {
		if b.prefix.Contains(a) {
			return b.reason
		}
	}
	return ""
}

// DialContext resolves address's host, refuses it when every address it
// resolves to is blocked, and otherwise connects to the first acceptable
// address that answers. It is an http.Transport's DialContext.
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
	for _, a := range addrs {
		if err := g.Check(host, a); err != nil {
			firstErr = cmpErr(firstErr, err)
			continue
		}
		conn, err := g.dial(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
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

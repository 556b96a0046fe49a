package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
)

// AnyHost in Config.Hosts answers every host name without tokens.
const AnyHost = "*"

// hostNameRe matches a host name's letters, digits, hyphens and
// underscores (container and service names have them), in dot-separated
// labels, with the trailing dot of a fully qualified name.
var hostNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}(\.[A-Za-z0-9_-]{1,63})*\.?$`)

// ValidateHost checks an entry of Config.Hosts: a host name, without
// scheme, port or path, or AnyHost.
func ValidateHost(name string) error {
	if name == AnyHost || (len(name) <= 254 && hostNameRe.MatchString(name)) {
		return nil
	}
	return fmt.Errorf("must be a host name such as herald.internal, without scheme, port or path, or %s for every host, not %q", AnyHost, name)
}

// hostKey is how a host name is compared: in lower case, without the
// trailing dot of a fully qualified name.
func hostKey(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// hosts are the host names a Server answers without tokens.
type hosts struct {
	// any is set by AnyHost: a proxy in front checks the name.
	any   bool
	names map[string]bool
}

func newHosts(names []string) *hosts {
	h := &hosts{names: map[string]bool{}}
	for _, n := range names {
		h.any = h.any || n == AnyHost
		h.names[hostKey(n)] = true
	}
	return h
}

// answers reports whether a request for hostport (Host, with or without a
// port) is answered, and the host name it asked for. A DNS rebinding page
// reaches this address under a name it owns, which its browser sends; an
// IP address or localhost is no name a page can own. A request without a
// Host comes from no browser.
func (h *hosts) answers(hostport string) (string, bool) {
	name := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		name = host
	}
	name = hostKey(name)
	if h.any || name == "" || name == "localhost" || h.names[name] {
		return name, true
	}
	_, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"))
	return name, err == nil
}

// refusal says why a request for host was refused and how to allow it.
func refusal(host string) string {
	return fmt.Sprintf("host %q is not answered: with no api.tokens, Herald answers only IP addresses, localhost "+
		"and the names in api.hosts, so that a web page cannot reach it by pointing its own name at this address "+
		"(DNS rebinding); set api.tokens, or add %q to api.hosts", host, host)
}

// guardHost refuses, with deny, the requests for a host name Config.Hosts
// does not list when no tokens are configured: then the Host is all that
// tells an operator's request from a rebinding page's. With tokens, every
// request goes through to next, whose token check is the guard.
func (s *Server) guardHost(next http.Handler, deny func(w http.ResponseWriter, msg string)) http.Handler {
	if len(s.tokens) > 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host, ok := s.hosts.answers(r.Host); !ok {
			deny(w, refusal(host))
			return
		}
		next.ServeHTTP(w, r)
	})
}

package api

import (
	"maps"
	"slices"
	"strings"

	"github.com/heraldhq/herald/notify"
)

// Redacted returns n as the API shows it: the same record, but with the
// values of its credential headers (notify.CredentialHeader, in any case:
// Authorization, Cookie, X-Api-Key, X-Gitlab-Token...) replaced by
// "[redacted]", the user information of its target URL and the values of
// its credential query parameters (?access_token=, ?sig=) by "xxxxx"
// (notify.RedactedURL), and those credentials by "[redacted]" where an
// attempt's error quotes them (a Go handler's error, or an attempt an older
// Herald recorded). The stored notification keeps them and every attempt
// sends them. n is not changed; a copy is made only when there is
// something to hide.
func Redacted(n *notify.Notification) *notify.Notification {
	if n == nil {
		return nil
	}
	out := *n
	changed := false
	if target := notify.RedactedURL(n.Target); target != n.Target {
		out.Target, changed = target, true
	}
	var headers map[string]string
	for name := range n.Headers {
		// Anyone who can read a record (a dashboard, a log of answers, a
		// pull consumer) need not hold its receiver's credentials.
		if notify.CredentialHeader(name) {
			if headers == nil {
				headers = maps.Clone(n.Headers)
			}
			headers[name] = notify.Redacted
		}
	}
	if headers != nil {
		out.Headers, changed = headers, true
	}
	if history := redactedHistory(n); history != nil {
		out.History, changed = history, true
	}
	if !changed {
		return n
	}
	return &out
}

// redactedHistory returns n's history with its credentials hidden in the
// attempts' errors, or nil when no error quotes one.
func redactedHistory(n *notify.Notification) []notify.Attempt {
	if len(n.History) == 0 || (len(n.Headers) == 0 && !strings.ContainsAny(n.Target, "@?")) {
		return nil
	}
	headers := make(map[string][]string, len(n.Headers))
	for name, v := range n.Headers {
		headers[name] = []string{v}
	}
	creds := notify.Credentials(n.Target, headers)
	var out []notify.Attempt
	for i, a := range n.History {
		hidden := notify.HideCredentials(a.Error, creds)
		if hidden == a.Error {
			continue
		}
		if out == nil {
			out = slices.Clone(n.History)
		}
		out[i].Error = hidden
	}
	return out
}

// redactedAll is Redacted for a list, in a new slice.
func redactedAll(ns []*notify.Notification) []*notify.Notification {
	out := make([]*notify.Notification, len(ns))
	for i, n := range ns {
		out[i] = Redacted(n)
	}
	return out
}

package api

import (
	"maps"

	"github.com/heraldhq/herald/notify"
)

// redactedValue replaces a credential header's value in answers.
const redactedValue = "[redacted]"

// Redacted returns n as the API shows it: the same record, but with the
// values of its credential headers (notify.CredentialHeader, in any case:
// Authorization, Cookie, X-Api-Key, X-Gitlab-Token...) replaced by
// "[redacted]", and the user information of its target URL and the values of its credential query parameters
// (?access_token=, ?sig=) by "xxxxx" (notify.RedactedURL). The stored
// notification keeps them and every attempt sends them. n is not changed;
// a copy is made only when there is something to hide.
func Redacted(n *notify.Notification) *notify.Notification {
	if n == nil {
		return nil
	}
	if target := notify.RedactedURL(n.Target); target != n.Target {
		out := *n
		out.Target = target
		n = &out
	}
	var headers map[string]string
	for name := range n.Headers {
		// Anyone who can read a record (a dashboard, a log of answers, a
		// pull consumer) need not hold its receiver's credentials.
		if notify.CredentialHeader(name) {
			if headers == nil {
				headers = maps.Clone(n.Headers)
			}
			headers[name] = redactedValue
		}
	}
	if headers == nil {
		return n
	}
	out := *n
	out.Headers = headers
	return &out
}

// redactedAll is Redacted for a list, in a new slice.
func redactedAll(ns []*notify.Notification) []*notify.Notification {
	out := make([]*notify.Notification, len(ns))
	for i, n := range ns {
		out[i] = Redacted(n)
	}
	return out
}

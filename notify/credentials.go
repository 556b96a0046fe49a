package notify

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
)

// Redacted stands for a hidden credential in answers and in the history.
const Redacted = "[redacted]"

// minCredential is the shortest part of a credential hidden on its own
// when it need not be secret (a user name, a cookie's value): a cookie's
// "en" would garble every word it is part of. A password is hidden
// whatever its length.
const minCredential = 8

// Credentials returns what a request to target with headers carries that
// is secret, longest first so that a whole value is hidden before its
// parts (HideCredentials): the values of its credential headers
// (CredentialHeader), the credentials after an Authorization scheme and,
// for Basic, the user and password they encode, each cookie's value, the
// target's user, password and the Basic token they make, and the values of
// its query's credential parameters (?access_token=), as sent and decoded.
// Every attempt asks it, so headers is a plain map, which a loop walks
// without the allocations a closure's captured variables cost.
func Credentials(target string, headers map[string][]string) []string {
	var out, passwords []string
	for name, vs := range headers {
		if CredentialHeader(name) {
			for _, v := range vs {
				out, passwords = headerCredentials(out, passwords, name, v)
			}
		}
	}
	// Most targets carry no user information nor query: not worth a parse.
	if strings.ContainsAny(target, "@?") {
		if u, err := url.Parse(target); err == nil {
			if u.User != nil {
				password, _ := u.User.Password()
				out = append(out, u.User.Username(), base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+password)))
				passwords = append(passwords, password)
			}
			out = append(out, queryCredentials(u.RawQuery)...)
		}
	}
	out = slices.DeleteFunc(out, func(c string) bool { return len(c) < minCredential })
	out = append(out, slices.DeleteFunc(passwords, func(p string) bool { return p == "" })...)
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// headerCredentials appends to out and passwords what the value v of a
// credential header named name holds.
func headerCredentials(out, passwords []string, name, v string) ([]string, []string) {
	out = append(out, v)
	if strings.EqualFold(name, "Cookie") {
		for pair := range strings.SplitSeq(v, ";") {
			if _, value, ok := strings.Cut(pair, "="); ok {
				out = append(out, strings.TrimSpace(value))
			}
		}
		return out, passwords
	}
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok {
		return out, passwords
	}
	cred = strings.TrimSpace(cred)
	out = append(out, cred)
	// A receiver that refuses Basic credentials may quote them as it
	// decoded them.
	if strings.EqualFold(scheme, "Basic") {
		if b, err := base64.StdEncoding.DecodeString(cred); err == nil {
			user, password, _ := strings.Cut(string(b), ":")
			out = append(out, string(b), user)
			passwords = append(passwords, password)
		}
	}
	return out, passwords
}

// queryCredentials returns the values of a raw query's credential
// parameters (CredentialParam), as sent and as decoded, since a receiver
// may quote either.
func queryCredentials(raw string) []string {
	var out []string
	for _, value := range credentialParams(strings.Split(raw, "&")) {
		out = append(out, value)
		if un, err := url.QueryUnescape(value); err == nil && un != value {
			out = append(out, un)
		}
	}
	return out
}

// HideCredentials returns s with Redacted in place of each of creds, which
// Credentials returned.
func HideCredentials(s string, creds []string) string {
	for _, c := range creds {
		s = strings.ReplaceAll(s, c, Redacted)
	}
	return s
}

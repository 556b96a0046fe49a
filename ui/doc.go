// Package ui is Herald's operator dashboard, served under /ui/ by the API
// role: server-rendered pages (html/template) over the same client and
// store the API uses, with their stylesheet and script embedded, so nothing
// but the herald binary is needed to build or run it.
//
// # Pages
//
//   - /ui/ shows each topic's counts (scheduled, waiting, reserved, dead),
//     its attempts and failures over the last five minutes and per minute
//     over the last hour, the 99th percentile of how late attempts
//     started, and whether it is paused; then each endpoint, the policies
//     file's and the API's: its URL, signing scheme, how many secrets (never
//     a value), max_in_flight, rate, health (failing since, disabled at) and
//     whether it is paused. Each table shows 100 rows a page, so that the
//     page stays small with thousands of topics or endpoints; the totals
//     count them all, and every paused topic and every paused or disabled
//     endpoint is linked from each page, as are the first 20 endpoints that
//     fail: every attempt since a time, as their health says, or every
//     attempt of the last five minutes.
//     Buttons there pause and resume a topic or an endpoint and enable an
//     endpoint its disable_after disabled: these lose nothing, so they act
//     at once, with no confirmation page, and the overview they return to
//     says what happened (a one-time message carried in a short-lived
//     cookie). The overview opens at the page of the row that
//     ?topic=NAME or ?endpoint=NAME names, as those links and returns do.
//   - /ui/notifications/{id} shows a notification, its endpoint (linked to
//     its row on the overview), its payload and headers (credential headers
//     such as Authorization redacted, as api.Redacted shows them), and its
//     attempt timeline: when each attempt ran, how it ended, the receiver's
//     status code and error, how long it took, and when the next attempt is
//     due (and how long overdue, when nothing has taken it), or, for one
//     held behind an earlier one of its order key, that one, or, for one
//     reserved, since when its attempt runs and by when it must end, or,
//     for one parked by a pause, what it waits for: its topic or endpoint
//     to be resumed, or its endpoint to be enabled.
//   - /ui/dead browses the dead letters by topic and time of death, a page
//     at a time through a cursor, each with the endpoint or the target
//     (redacted as above) it was for and how its last attempt ended, and
//     offers replay and purge of what the filter selects: a confirmation
//     page first counts the matches (a dry run), and only its form changes
//     anything, leaving alone what died after the count.
//   - /ui/policies prints each policy's schedule table and the topics,
//     their targets' credentials (user information, and query parameters
//     such as access_token) redacted as on a notification's page.
//
// Every page reads without JavaScript; a small embedded script refreshes
// the overview and notification pages every few seconds, and when it
// cannot (the server is unreachable, the session has ended) greys what
// they show and says at their top since when it is not current.
//
// # Security
//
// The dashboard takes the API's bearer tokens: an operator signs in once
// with a token and gets a session cookie (HttpOnly, SameSite=Strict, scoped
// to /ui/, and Secure when reached over TLS, which a proxy in front says in
// X-Forwarded-Proto), signed with a key derived from that token, so it lasts across
// restarts and every API process accepts it, and removing the token from
// the configuration ends its sessions. A session lasts Config.SessionTTL (12
// hours) unless signed out: signing out ends it on every process, not only
// in that browser, since the sign-out is kept in Redis until the session
// would have expired (the store's signedout key), so that a copy of the
// cookie opens nothing afterwards. Each page request with a session costs
// one EXISTS for that; when Redis does not answer it, the request is
// refused with 503, as the pages that read Redis would be anyway. With no
// tokens configured the dashboard is open, as /v1 is, and every page says
// so; it still gives each browser a session, under a key every process
// shares, for the CSRF token of its forms, and a sign-out ends that
// session's CSRF token the same way.
//
// Forms that change state (replay, purge, pause, resume, enable, sign-out)
// carry a per-session token that the server checks, and a request whose
// Origin or Sec-Fetch-Site names another site is refused. No form's body,
// the sign-in's included, is read past 64 KiB: a larger one gets 413.
// Pages are sent with a Content-Security-Policy that allows no inline
// script or style, and everything a caller or a receiver supplied
// (payloads, headers, errors) is escaped by html/template.
package ui

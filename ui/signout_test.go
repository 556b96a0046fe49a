package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/ui"
)

// signedOut returns the remaining life of each sign-out the store holds in
// b's namespace.
func (b *testBundle) signedOut(t *testing.T) []time.Duration {
	t.Helper()
	ctx := context.Background()
	rdb := server.Client(t)
	var ttls []time.Duration
	iter := rdb.Scan(ctx, 0, b.store.Namespace()+":signedout:*", 100).Iterator()
	for iter.Next(ctx) {
		ttl, err := rdb.PTTL(ctx, iter.Val()).Result()
		require.NoError(t, err)
		ttls = append(ttls, ttl)
	}
	require.NoError(t, iter.Err())
	return ttls
}

// signOut signs the test's browser out from the dashboard's own page.
func (b *testBundle) signOut(t *testing.T) {
	t.Helper()
	_, page := b.get(t, "/ui/")
	res, _ := b.post(t, "/ui/logout", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/ui/login", res.Header.Get("Location"))
}

func TestSignOut(t *testing.T) {
	t.Parallel()

	// A copy of the cookie taken before sign-out (a shared computer, a
	// proxy's log) opens nothing afterwards, on any API process, while
	// another session of the same token goes on.
	t.Run("CopiedCookieIsRefusedEverywhere", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		other := b.process(t, testToken)
		b.login(t)
		copied := b.cookies(t)
		second := serve(b.handler, http.MethodPost, "/ui/login", nil, url.Values{"token": {testToken}}).Result().Cookies()
		require.Len(t, second, 1)
		for _, h := range []http.Handler{b.handler, other} {
			require.Equal(t, http.StatusOK, serve(h, http.MethodGet, "/ui/policies", copied, nil).Code)
		}

		b.clock.Advance(time.Hour)
		b.signOut(t)

		for _, h := range []http.Handler{b.handler, other} {
			rec := serve(h, http.MethodGet, "/ui/policies", copied, nil)
			require.Equal(t, http.StatusSeeOther, rec.Code)
			require.Equal(t, "/ui/login?next="+url.QueryEscape("/ui/policies"), rec.Header().Get("Location"))
			require.Equal(t, http.StatusOK, serve(h, http.MethodGet, "/ui/policies", second, nil).Code, "another session goes on")
		}
		ttls := b.signedOut(t)
		require.Len(t, ttls, 1)
		left := ui.SessionTTLDefault - time.Hour
		require.LessOrEqual(t, ttls[0], left, "kept no longer than the session would have lasted")
		require.Greater(t, ttls[0], left-time.Minute)
	})

	// The sign-out form is a state change like any other: without the
	// session's CSRF token, or from another site, it ends nothing.
	t.Run("NeedsTheCSRFTokenAndThisSite", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.login(t)
		_, page := b.get(t, "/ui/policies")
		res, _ := b.post(t, "/ui/logout", url.Values{"csrf": {"made-up"}}, b.server.URL)
		require.Equal(t, http.StatusForbidden, res.StatusCode)
		res, _ = b.post(t, "/ui/logout", url.Values{"csrf": {csrf(t, page)}}, "https://evil.example")
		require.Equal(t, http.StatusForbidden, res.StatusCode)
		status, _ := b.get(t, "/ui/policies")
		require.Equal(t, http.StatusOK, status)
		require.Empty(t, b.signedOut(t))
	})

	// With no tokens anyone gets a session, so signing out protects little,
	// but it still ends the session: its CSRF token no longer changes
	// anything, and the browser simply gets a new session.
	t.Run("NoTokensEndsTheSessionsToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, page := b.get(t, "/ui/")
		copied, token := b.cookies(t), csrf(t, page)
		b.signOut(t)

		rec := serve(b.handler, http.MethodPost, "/ui/topics/orders/pause", copied, url.Values{"csrf": {token}})
		require.Equal(t, http.StatusForbidden, rec.Code)
		rec = serve(b.handler, http.MethodGet, "/ui/policies", copied, nil)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Len(t, rec.Result().Cookies(), 1, "a new session")
	})

	// Checking for a sign-out costs a page one EXISTS, which a Redis
	// Cluster serves from one slot.
	t.Run("CostsOneExistsAPage", func(t *testing.T) {
		t.Parallel()
		b, rs := setupOwn(t, testToken)
		b.login(t)
		status, _ := b.get(t, "/ui/policies") // the store's client connects
		require.Equal(t, http.StatusOK, status)
		rdb := rs.Client(t)
		ctx := context.Background()
		require.NoError(t, rdb.ConfigResetStat(ctx).Err())
		const pages = 10
		for range pages {
			status, _ := b.get(t, "/ui/policies")
			require.Equal(t, http.StatusOK, status)
		}
		var commands []string
		for _, line := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
			if strings.HasPrefix(line, "cmdstat_") && !strings.HasPrefix(line, "cmdstat_config") && !strings.HasPrefix(line, "cmdstat_info") {
				commands = append(commands, line[:strings.Index(line, ",")])
			}
		}
		require.Equal(t, []string{fmt.Sprintf("cmdstat_exists:calls=%d", pages)}, commands)
	})

	// A sign-out Redis refuses to record (here, for want of a replica) is
	// not passed off as done: the session, and its cookie, go on, and the
	// operator is told to try again. (A full Redis records it: see the
	// store's TestSignOutWhenRedisIsFull.)
	t.Run("UnrecordedSignOutSaysSo", func(t *testing.T) {
		t.Parallel()
		b, rs := setupOwn(t, testToken)
		b.login(t)
		_, page := b.get(t, "/ui/")
		rdb := rs.Client(t)
		require.NoError(t, rdb.ConfigSet(context.Background(), "min-replicas-to-write", "1").Err())
		res, body := b.post(t, "/ui/logout", url.Values{"csrf": {csrf(t, page)}}, b.server.URL)
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
		require.Contains(t, body, "try again")
		require.Empty(t, res.Cookies(), "the cookie is kept")
		require.NoError(t, rdb.ConfigSet(context.Background(), "min-replicas-to-write", "0").Err())
		status, _ := b.get(t, "/ui/policies")
		require.Equal(t, http.StatusOK, status)
	})

	// Whether a session was signed out is known only to Redis: when it does
	// not answer, no page is served on the strength of the cookie alone,
	// even one that needs nothing else from Redis.
	t.Run("StoreDownRefusesTheSession", func(t *testing.T) {
		t.Parallel()
		b, rs := setupOwn(t, testToken)
		b.login(t)
		status, _ := b.get(t, "/ui/policies")
		require.Equal(t, http.StatusOK, status)
		rs.Stop()
		status, body := b.get(t, "/ui/policies")
		require.Equal(t, http.StatusServiceUnavailable, status)
		require.Contains(t, body, "The store did not answer")
	})
}

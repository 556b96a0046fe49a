package httpsend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		value string
		want  time.Duration
	}{
		{value: "", want: 0},
		{value: "120", want: 2 * time.Minute},
		{value: " 5 ", want: 5 * time.Second},
		{value: "0", want: 0},
		{value: "-3", want: 0},
		{value: "99999999999999", want: 365 * 24 * time.Hour},
		{value: "99999999999999999999", want: 365 * 24 * time.Hour},
		{value: "-99999999999999999999", want: 0},
		{value: "Fri, 01 May 2026 12:01:30 GMT", want: 90 * time.Second},
		{value: "Friday, 01-May-26 12:00:10 GMT", want: 10 * time.Second},
		{value: "Fri, 01 May 2026 11:59:00 GMT", want: 0},
		{value: "soon", want: 0},
	} {
		require.Equal(t, tt.want, RetryAfter(tt.value, now), tt.value)
	}
}

func TestClassifyError(t *testing.T) {
	t.Parallel()

	defaults := notify.Rules{}
	strict := notify.Rules{RetryOn: []string{"5xx"}}
	blocked := &BlockedError{Host: "10.0.0.1", Addr: netip.MustParseAddr("10.0.0.1"), Reason: "private"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", errors.New("connection refused"))}

	for _, tt := range []struct {
		name      string
		rules     notify.Rules
		err       error
		permanent bool
	}{
		{name: "Blocked", rules: defaults, err: fmt.Errorf("post: %w", blocked), permanent: true},
		{name: "Deadline", rules: defaults, err: fmt.Errorf("post: %w", context.DeadlineExceeded)},
		{name: "DeadlineNotRetried", rules: strict, err: context.DeadlineExceeded, permanent: true},
		{name: "Refused", rules: defaults, err: refused},
		{name: "RefusedNotRetried", rules: strict, err: refused, permanent: true},
		{name: "UnknownHost", rules: defaults, err: &net.DNSError{Err: "no such host", Name: "x.test", IsNotFound: true}},
		{name: "CanceledAlwaysRetryable", rules: strict, err: context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ClassifyError(&tt.rules, tt.err)
			require.ErrorIs(t, err, tt.err)
			var perm *notify.PermanentError
			require.Equal(t, tt.permanent, errors.As(err, &perm))
		})
	}
	require.NoError(t, ClassifyError(&defaults, nil))
}

func TestClassifyStatus(t *testing.T) {
	t.Parallel()

	now := time.Now()
	honoring := notify.Rules{HonorRetryAfter: true}
	ignoring := notify.Rules{}
	header := http.Header{"Retry-After": {"30"}}

	for _, tt := range []struct {
		name       string
		rules      notify.Rules
		status     int
		permanent  bool
		retryAfter time.Duration
	}{
		{name: "OK", rules: honoring, status: 200},
		{name: "NoContent", rules: honoring, status: 204},
		{name: "TooManyHonoured", rules: honoring, status: 429, retryAfter: 30 * time.Second},
		{name: "TooManyIgnored", rules: ignoring, status: 429},
		{name: "Unavailable", rules: honoring, status: 503, retryAfter: 30 * time.Second},
		{name: "Redirect", rules: honoring, status: 301, permanent: true},
		{name: "BadRequestIgnoresRetryAfter", rules: honoring, status: 400, permanent: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ClassifyStatus(&tt.rules, &Result{StatusCode: tt.status, Header: header, Body: []byte(" busy \n")}, now)
			if tt.status < 300 {
				require.NoError(t, err)
				return
			}
			var status *StatusError
			require.ErrorAs(t, err, &status)
			require.Equal(t, tt.status, status.StatusCode)
			require.Equal(t, "busy", status.Body)
			var perm *notify.PermanentError
			require.Equal(t, tt.permanent, errors.As(err, &perm))
			var retry *notify.RetryError
			if tt.retryAfter > 0 {
				require.ErrorAs(t, err, &retry)
				require.Equal(t, tt.retryAfter, retry.RetryAfter)
			}
		})
	}
}

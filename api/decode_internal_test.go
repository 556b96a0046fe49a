package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/notify"
)

// TestLocateCostsOneDecode decodes a notification whose backoff array of
// 2,600 entries ends in a bad one: naming the entry costs about one more
// decode of the body (counted in allocations, which do not drift with the
// machine's load), not one decode per entry.
func TestLocateCostsOneDecode(t *testing.T) {
	body := []byte(`{"id":"c-1","topic":"jobs","payload":{},"backoff":[` + strings.Repeat(`"1s",`, 2599) + `"soon"]}`)
	plain := testing.AllocsPerRun(3, func() {
		var r notify.Request
		_ = json.Unmarshal(body, &r)
	})
	var err error
	located := testing.AllocsPerRun(3, func() {
		var r notify.Request
		err = decodeJSON(body, &r)
	})
	var fe *notify.FieldError
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, "backoff[2599]", fe.Field)
	require.Less(t, located, 4*plain, "decoding and locating cost %.0f allocations, one decode %.0f", located, plain)
}

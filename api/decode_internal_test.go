package api

import (
	"encoding/json"
	"errors"
	"reflect"
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

// TestDuplicateReadsEveryShape walks bodies whose strings hold the JSON
// punctuation and escapes a scanner could mistake for structure: a field is
// found twice only when it is.
func TestDuplicateReadsEveryShape(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"None", `{"id":"a","topic":"jobs"}`, ""},
		{"PunctuationInStrings", `{ "id" : "a\",\"id\":\"b" , "headers" : { "X" : "}]{[,:" , "Y" : "\\" } , "topic" : "jobs" }`, ""},
		{"PayloadKeptAsGiven", `{"payload":{"id":1,"id":[{"id":2}]},"backoff":[1, 2.5e3, "1s"],"ttr":null,"topic":"jobs"}`, ""},
		{"AfterThePayload", `{"payload":{"x":"}"},"topic":"a","topic":"b"}`, "topic"},
		{"OtherCase", `{"Topic":"a","topic":"b"}`, "topic"},
		{"HeaderKey", `{"headers":{"X":"1","Y":"2","X":"3"}}`, "headers.X"},
		{"HeaderKeysDifferInCase", `{"headers":{"X":"1","x":"2"}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r notify.Request
			require.NoError(t, json.Unmarshal([]byte(tt.body), &r), "a valid body")
			path, found := duplicate([]byte(tt.body), reflect.TypeFor[notify.Request]())
			require.Equal(t, tt.want != "", found, path)
			require.Equal(t, tt.want, strings.TrimPrefix(path, "."))
		})
	}
}

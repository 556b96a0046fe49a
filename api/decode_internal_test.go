package api

import (
	"encoding/json"
	"errors"
	"fmt"
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
// manyHeaders is a body with n headers ..., then again the one
// named again if not empty.
func manyHeaders(n int, again string) string {
	var b strings.Builder
	b.WriteString(`{"topic":"jobs","headers":{`)
	for i := range n {
		fmt.Fprintf(&b, `"X-%d":"%d",`, i, i)
	}
	if again != "" {
		fmt.Fprintf(&b, `%q:"again",`, again)
	}
	b.WriteString(`"Y":""}}`)
	return b.String()
}

func TestDuplicateReadsEveryShape(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"None", `{"id":"a","topic":"jobs"}`, ""},
		{"PunctuationInStrings", `{ "id" : "a\",\"id\":\"b" , "headers" : { "X" : "}]{[,:" , "Y" : "\\" } , "topic" : "jobs" }`, ""},
		{"PayloadKeptAsGiven", `{"payload":{"id":1,"id":[{"id":2}]},"backoff":[1, 2.5e3, "1s"],"ttr":null,"topic":"jobs"}`, ""},
		{"AfterThePayload", `{"payload":{"x":"}"},"topic":"a","topic":"b"}`, "topic"},
		{"OtherCase", `{"Topic":"a","topic":"b"}`, "topic"},
		{"EscapedOtherCase", `{"\u0049D":"a","id":"b"}`, "id"},
		{"KelvinSign", `{"bac\u212aoff":["1s"],"backoff":["2s"]}`, "backoff"},
		{"HeaderKey", `{"headers":{"X":"1","Y":"2","X":"3"}}`, "headers.X"},
		{"HeaderKeysDifferInCase", `{"headers":{"X":"1","x":"2"}}`, ""},
		{"EscapedHeaderKey", `{"headers":{"\u00e9":"1","é":"2"}}`, "headers.é"},
		{"BadUTF8HeaderKey", "{\"headers\":{\"\xff\":\"1\",\"\\ufffd\":\"2\"}}", "headers.\ufffd"},
		{"ManyHeaderKeys", manyHeaders(40, ""), ""},
		{"ManyHeaderKeysOneTwice", manyHeaders(40, "X-3"), "headers.X-3"},
		{"ManyHeaderKeysLastTwice", manyHeaders(40, "X-39"), "headers.X-39"},
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

// enqueueBody is a typical enqueue body: eleven fields, a payload, a few
// headers and a backoff list.
var enqueueBody = []byte(`{"id":"order-12345","topic":"orders","channel":"webhook","target":"https://shop.example/hooks/n",` +
	`"payload":{"order":12345,"status":"paid","amount":"99.00"},"policy":"standard","backoff":["1s","5s","30s"],` +
	`"ttr":"30s","delay":"1m","headers":{"X-Shop":"42","X-Region":"eu"},"order_key":"customer-7"}`)

// TestDuplicateCostsNothing: looking for a member given twice in a typical
// body, one without escaped names, allocates nothing. The check runs on
// every body and batch item, so a copy or a string per member, repeated
// for every field it is compared with, more than doubled what decoding an
// enqueue cost.
func TestDuplicateCostsNothing(t *testing.T) {
	typ := reflect.TypeFor[notify.Request]()
	allocs := testing.AllocsPerRun(100, func() {
		if path, found := duplicate(enqueueBody, typ); found {
			t.Fatalf("found %q twice", path)
		}
	})
	require.Zero(t, allocs, "the duplicate check allocated")
}

func BenchmarkDecodeEnqueue(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(enqueueBody)))
	for b.Loop() {
		var r notify.Request
		if err := decodeJSON(enqueueBody, &r); err != nil {
			b.Fatal(err)
		}
	}
}

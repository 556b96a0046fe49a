package asynqimport_test

import (
	"fmt"
	"os"

	"github.com/heraldhq/herald/asynqimport"
)

// Task types map to topics, and optionally to a policy that replaces the
// topic's; asynq types may hold ':'.
func ExampleParseMapping() {
	for _, flag := range []string{"email:deliver=emails", "order:notify=order-notify:alipay-notify"} {
		taskType, m, err := asynqimport.ParseMapping(flag)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s -> topic %s, policy %q\n", taskType, m.Topic, m.Policy)
	}
	// Output:
	// email:deliver -> topic emails, policy ""
	// order:notify -> topic order-notify, policy "alipay-notify"
}

// What `herald import asynq --move` prints.
func ExampleSummary_WriteTo() {
	sum := &asynqimport.Summary{
		Queue: "payments", States: asynqimport.AllStates, Move: true,
		Matched: 1204, Imported: 1190, Present: 10, Skipped: 4, Base64: 2, Deleted: 1200,
		Reasons: []*asynqimport.Reason{{Reason: `type "report:build" is not mapped to a topic`, Count: 4, IDs: []string{"r1", "r2", "r3", "r4"}}},
	}
	_, _ = sum.WriteTo(os.Stdout)
	// Output:
	// matched             1204 (queue payments: scheduled, retry, pending, archived)
	// imported            1190
	// already present     10
	// skipped             4
	//   4: type "report:build" is not mapped to a topic (r1, r2, r3, r4)
	// base64 payloads     2
	// deleted from asynq  1200
}

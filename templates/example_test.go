package templates_test

import (
	"encoding/json"
	"fmt"

	"github.com/heraldhq/herald/notify"
	"github.com/heraldhq/herald/templates"
)

func ExampleSet_Render() {
	set, err := templates.Load(".")
	if err != nil {
		panic(err)
	}
	body, err := set.Render("appointment-reminder.sms", &notify.Notification{
		ID:      "appt-42",
		Topic:   "appointment-reminder",
		Payload: json.RawMessage(`{"name":"Ana","with":"Dr. Silva","starts_at":"2026-05-04T15:30:00+02:00"}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Print(string(body))
	// Output: Hi Ana, a reminder of your appointment with Dr. Silva at 15:30 on Mon 4 May.
}

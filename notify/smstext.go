package notify

import (
	"encoding/json"
	"errors"
	"strings"
)

// SMSText returns the text of an SMS whose notification names no
// template: its payload as a JSON string ("Your code is 1234"), or the
// "text" string of a payload object ({"text": "Your code is 1234"}),
// trimmed of surrounding white space. The sms sender sends it, and an
// enqueue refuses a payload it finds no text in, rather than accept an
// SMS that can never be sent.
func SMSText(payload []byte) (string, error) {
	var (
		str string
		// Text is nil in an object without "text", which is the caller's
		// slip (a gateway's own "body", say), not an empty message.
		obj struct {
			Text *string `json:"text"`
		}
		text string
	)
	switch {
	case json.Unmarshal(payload, &str) == nil:
		text = str
	case json.Unmarshal(payload, &obj) == nil && obj.Text != nil:
		text = *obj.Text
	default:
		return "", errors.New(`must be a JSON string or an object with a "text" string, or the notification must name a template`)
	}
	text = strings.TrimSpace(text)
	if text == "" {
		return "", errors.New("holds an empty message text")
	}
	return text, nil
}

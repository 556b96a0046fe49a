package endpoint

import (
	"errors"
	"time"

	"github.com/heraldhq/herald/notify"
)

// Where an endpoint comes from.
const (
	SourceFile = "file"
	SourceAPI  = "api"
)

// ErrInFile means an endpoint name is defined in the policies file, which
// wins over the API: change it there.
var ErrInFile = errors.New("endpoint is defined in the policies file, which wins over the API; change it there")

// View is what the API and the CLI show of an endpoint: everything but its
// secrets' values.
type View struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	// Shadowed is set on an endpoint registered over the API whose name the
	// policies file now defines too: the file's is the one in force.
	Shadowed     bool            `json:"shadowed,omitempty"`
	URL          string          `json:"url"`
	Signing      string          `json:"signing"`
	Secrets      []SecretView    `json:"secrets"`
	MaxInFlight  int             `json:"max_in_flight"`
	Rate         float64         `json:"rate"`
	DisableAfter notify.Duration `json:"disable_after"`
	// Paused is set while the endpoint is paused: none of its
	// notifications is attempted.
	Paused bool `json:"paused"`
	// Disabled is set once every attempt has failed for disable_after: its
	// notifications wait until it is enabled (POST .../enable).
	Disabled bool `json:"disabled"`
	// DisabledAt and FailingSince, shown by GET of one endpoint, say when
	// it was disabled and since when every attempt to it has failed.
	DisabledAt   *time.Time `json:"disabled_at,omitempty"`
	FailingSince *time.Time `json:"failing_since,omitempty"`
}

// SecretView shows a secret without its value.
type SecretView struct {
	// ID names the secret (SecretID).
	ID        string     `json:"id"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Expired is set once the secret no longer signs.
	Expired bool `json:"expired,omitempty"`
	// PublicKey, for ed25519, is the key receivers verify with.
	PublicKey string `json:"public_key,omitempty"`
}

// View returns what may be shown of e, named name, from source, at now.
func (e *Endpoint) View(name, source string, now time.Time) View {
	v := View{
		Name: name, Source: source, URL: notify.RedactedURL(e.URL), Signing: e.signing(), Secrets: []SecretView{},
		MaxInFlight: e.MaxInFlight, Rate: e.Rate, DisableAfter: e.DisableAfter,
	}
	for _, s := range e.Secrets {
		v.Secrets = append(v.Secrets, SecretView{
			ID: SecretID(s), ExpiresAt: s.ExpiresAt, PublicKey: e.PublicKey(s),
			Expired: s.ExpiresAt != nil && !s.ExpiresAt.After(now),
		})
	}
	return v
}

package policy

import (
	"maps"
	"slices"

	"github.com/heraldhq/herald/endpoint"
	"github.com/heraldhq/herald/notify"
)

// WithEndpoints returns a copy of s holding endpoints, the policies file's
// endpoints: section, each validated. An error names the offending key,
// such as "endpoints.merchant-42.secrets[1].value", and never holds a
// secret.
func (s *Set) WithEndpoints(endpoints map[string]endpoint.Endpoint) (*Set, error) {
	out := *s
	out.Endpoints = make(map[string]endpoint.Endpoint, len(endpoints))
	for _, name := range slices.Sorted(maps.Keys(endpoints)) {
		e := endpoints[name]
		if !endpoint.ValidName(name) {
			return nil, notify.Errorf("endpoints."+name, "endpoint names must match [A-Za-z0-9._:-]{1,128}")
		}
		if err := e.Validate(); err != nil {
			return nil, prefix("endpoints."+name, err)
		}
		out.Endpoints[name] = e
	}
	return &out, nil
}

// checkTopicEndpoint checks a topic's default endpoint: well formed, and
// not given with a default target. Whether it exists is checked on
// enqueue, since it may be registered over the API.
func checkTopicEndpoint(field string, t *Topic) error {
	switch {
	case t.Endpoint == "":
		return nil
	case t.Target != "":
		return notify.Errorf(field+".endpoint", "give endpoint or target, not both")
	case !endpoint.ValidName(t.Endpoint):
		return notify.Errorf(field+".endpoint", "must match [A-Za-z0-9._:-]{1,128}")
	case t.Channel != "" && t.Channel != notify.ChannelWebhook:
		return notify.Errorf(field+".endpoint", "is for channel webhook only")
	}
	return nil
}

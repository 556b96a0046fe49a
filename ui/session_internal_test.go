package ui

import (
	"crypto/hmac"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

// FuzzSessionCheck: a cookie opens a session only with a valid signature
// under a configured token's key, and checking never panics.
func FuzzSessionCheck(f *testing.F) {
	s, err := newSessions([]string{"token-a", "token-b"}, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	issued, _ := s.issue(1, now)
	f.Add(issued)
	f.Add("")
	f.Add(".")
	f.Add("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.AAAA")
	f.Add(strings.Replace(issued, ".", "", 1))
	f.Fuzz(func(t *testing.T, value string) {
		if s.check(value, now) == nil {
			return
		}
		p, m, _ := strings.Cut(value, ".")
		payload, _ := base64.RawURLEncoding.DecodeString(p)
		mac, _ := base64.RawURLEncoding.DecodeString(m)
		for _, key := range s.keys {
			if hmac.Equal(mac, sign(key, "session", payload)) {
				return
			}
		}
		t.Fatalf("cookie %q accepted without a valid signature", value)
	})
}

// TestSessionTampered: changing any character of an issued cookie ends it.
func TestSessionTampered(t *testing.T) {
	t.Parallel()
	s, err := newSessions([]string{"token-a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	value, _ := s.issue(0, now)
	for i := range value {
		for _, c := range []byte("Aa0_-.") {
			if value[i] == c {
				continue
			}
			forged := value[:i] + string(c) + value[i+1:]
			if s.check(forged, now) != nil {
				t.Fatalf("tampered cookie %q (position %d) accepted", forged, i)
			}
		}
	}
}

func TestSessionExpires(t *testing.T) {
	t.Parallel()
	s, err := newSessions([]string{"token-a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	value, _ := s.issue(0, now)
	if s.check(value, now.Add(59*time.Minute)) == nil {
		t.Fatal("a session was refused before its end")
	}
	if s.check(value, now.Add(time.Hour)) != nil {
		t.Fatal("a session was accepted after its end")
	}
	other, err := newSessions([]string{"token-b"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if other.check(value, now) != nil {
		t.Fatal("a session signed under a removed token was accepted")
	}
}

package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// cookieName is the session cookie's name.
const cookieName = "herald_session"

// sessions signs and checks session cookies. A cookie holds its expiry and
// a random nonce, signed with HMAC-SHA256 under a key derived from the
// token it was signed in with; with no tokens, under openKey. The only
// thing kept server-side is a sign-out, in the store until the session's
// end (Store.SignOut), since a copy of the cookie would outlive its deletion.
type sessions struct {
	// keys are the signing keys, one per configured token.
	keys [][]byte
	// tokens are SHA-256 sums of the configured tokens, compared in
	// constant time at sign-in.
	tokens [][sha256.Size]byte
	// open is true when no tokens are configured.
	open bool
	ttl  time.Duration
}

// session is a checked session cookie.
type session struct {
	// csrf is the token the session's state-changing forms must carry.
	csrf string
	// id names the session's sign-out in the store: a hash of its nonce, so
	// that Redis holds nothing a cookie is made of.
	id string
	// end is when the session expires.
	end time.Time
}

func newSessions(tokens []string, ttl time.Duration) (*sessions, error) {
	s := &sessions{open: len(tokens) == 0, ttl: ttl}
	for _, t := range tokens {
		sum := sha256.Sum256([]byte(t))
		s.tokens = append(s.tokens, sum)
		mac := hmac.New(sha256.New, []byte(t))
		mac.Write([]byte("herald ui session key"))
		s.keys = append(s.keys, mac.Sum(nil))
	}
	if s.open {
		s.keys = [][]byte{openKey}
	}
	return s, nil
}

// openKey signs the sessions of a dashboard without tokens. Such a
// dashboard gives a session to whoever asks, so the key guards nothing a
// visitor could not have; what it must be is the same in every process
// behind one address, or a form from one process's page is refused by
// the next. A state change still needs the session's CSRF token, which
// another site cannot read, a cookie that SameSite=Strict keeps off its
// requests, and an origin that names this site.
var openKey = []byte("herald ui session key without tokens")

// tokenIndex returns the index of the configured token equal to token, or
// -1. Every token is compared, in constant time.
func (s *sessions) tokenIndex(token string) int {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t[:]) == 1 {
			found = i
		}
	}
	return found
}

// issue returns a new cookie value signed with key i, and its session.
func (s *sessions) issue(i int, now time.Time) (string, *session) {
	var payload [8 + 16]byte
	binary.BigEndian.PutUint64(payload[:8], uint64(now.Add(s.ttl).Unix()))
	_, _ = rand.Read(payload[8:])
	value := b64(payload[:]) + "." + b64(sign(s.keys[i], "session", payload[:]))
	return value, newSession(s.keys[i], payload[:])
}

// newSession returns the session of a cookie payload (expiry, then nonce)
// signed with key.
func newSession(key, payload []byte) *session {
	id := sha256.Sum256(payload[8:])
	return &session{
		csrf: b64(sign(key, "csrf", payload[8:])),
		id:   b64(id[:]),
		end:  time.Unix(int64(binary.BigEndian.Uint64(payload[:8])), 0),
	}
}

// check returns the session of a cookie value, or nil when it is not one
// this server signed or it has expired.
func (s *sessions) check(value string, now time.Time) *session {
	p, m, ok := strings.Cut(value, ".")
	if !ok {
		return nil
	}
	// Strict: one cookie has one spelling.
	payload, err1 := base64.RawURLEncoding.Strict().DecodeString(p)
	mac, err2 := base64.RawURLEncoding.Strict().DecodeString(m)
	if err1 != nil || err2 != nil || len(payload) != 24 {
		return nil
	}
	found := -1
	for i, key := range s.keys {
		if hmac.Equal(mac, sign(key, "session", payload)) {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	if ss := newSession(s.keys[found], payload); now.Before(ss.end) {
		return ss
	}
	return nil
}

func sign(key []byte, purpose string, data []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(purpose))
	mac.Write([]byte{0})
	mac.Write(data)
	return mac.Sum(nil)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// setCookie sends a dashboard cookie, the session's or the flash message's
// (value "" deletes it).
func setCookie(w http.ResponseWriter, r *http.Request, name, value string, ttl time.Duration) {
	c := &http.Cookie{
		Name: name, Value: value, Path: Prefix,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r),
		MaxAge: int(ttl / time.Second),
	}
	if value == "" {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// overTLS reports whether the browser reached the dashboard over TLS:
// directly, or through a proxy that ended TLS and said so in
// X-Forwarded-Proto, the usual way to serve Herald, which listens on plain
// HTTP; of a list of proxies, the first, the browser's, counts. A forged
// header only keeps the sender's own cookie off plain HTTP.
func overTLS(r *http.Request) bool {
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return r.TLS != nil || strings.EqualFold(strings.TrimSpace(proto), "https")
}

// sessionHandler is a page handler that runs inside a checked session.
type sessionHandler func(w http.ResponseWriter, r *http.Request, s *session)

// guard runs next inside a session. Without a valid cookie, or with one
// signed out, a page request goes to the login form; with no tokens
// configured a session is opened on the spot, so that forms still carry a
// CSRF token. A POST must come from this site and carry the session's CSRF
// token, or it is refused with 403; its form is read first, within
// maxFormBody. When the store cannot say whether the session was signed
// out, the request is answered 503, as every page would be without it.
func (h *Handler) guard(next sessionHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := h.store.Now()
		s, err := h.session(r, now)
		if err != nil {
			h.fail(w, r, nil, err)
			return
		}
		if r.Method == http.MethodPost {
			if !h.parseForm(w, r, s) {
				return
			}
			if s == nil || !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
				h.refuse(w, r, s)
				return
			}
			next(w, r, s)
			return
		}
		if s == nil {
			if !h.sessions.open {
				http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			var value string
			value, s = h.sessions.issue(0, now)
			setCookie(w, r, cookieName, value, h.cfg.SessionTTL)
		}
		next(w, r, s)
	})
}

// session returns r's session, or nil when its cookie is missing, is not
// valid at now, or was signed out (on any process: they share the store).
// Only a valid cookie costs a store call.
func (h *Handler) session(r *http.Request, now time.Time) (*session, error) {
	var s *session
	if c, err := r.Cookie(cookieName); err == nil {
		s = h.sessions.check(c.Value, now)
	}
	if s == nil {
		return nil, nil
	}
	ctx, cancel := h.storeContext(r)
	defer cancel()
	out, err := h.store.SignedOut(ctx, s.id)
	if err != nil || out {
		return nil, err
	}
	return s, nil
}

// maxFormBody bounds the body of a dashboard form. The largest form is the
// confirmation page's, whose ids an operator may have listed by hand in its
// address: 64 KiB holds hundreds of the longest ids, while the others carry
// a token and a path. Without a bound, Go reads up to 10 MiB of a
// urlencoded body into memory, and writes a multipart body's files to disk
// without limit.
const maxFormBody = 64 << 10

// parseForm reads r's urlencoded form into r.PostForm, reading at most
// maxFormBody bytes of the body, and reports whether it could; if not, it
// has answered, 413 for a larger body. It parses no other content type, so
// such a body goes unread: no dashboard page sends one.
func (h *Handler) parseForm(w http.ResponseWriter, r *http.Request, s *session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	// A declared length over the bound is refused unread, whatever the
	// content type; the reader catches a body that declares none.
	var err error
	tooLarge := r.ContentLength > maxFormBody
	if !tooLarge {
		err = r.ParseForm()
		var mbe *http.MaxBytesError
		tooLarge = errors.As(err, &mbe)
	}
	if tooLarge {
		h.render(w, r, http.StatusRequestEntityTooLarge, "error", s, &errorData{Title: "Too large",
			Message: fmt.Sprintf("This form is larger than the %d KiB the dashboard accepts. Nothing was changed.", maxFormBody>>10)})
		return false
	}
	if err != nil {
		h.render(w, r, http.StatusBadRequest, "error", s, &errorData{Title: "Bad request",
			Message: "This form could not be read. Nothing was changed."})
		return false
	}
	return true
}

// refuse answers a state change that failed the CSRF or origin check.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, s *session) {
	h.render(w, r, http.StatusForbidden, "error", s, &errorData{Title: "Refused",
		Message: "This form did not come from this dashboard's own page (its security token is missing or stale, " +
			"or it was sent from another site). Nothing was changed. Reload the page and try again."})
}

// sameOrigin reports whether a state-changing request came from this site:
// a browser's Sec-Fetch-Site must say same-origin, and an Origin header
// must name this host. A client that sends neither (curl with the cookie)
// still needs the CSRF token.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

type loginData struct {
	Next  string
	Error string
}

// loginPage handles GET /ui/login.
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if h.sessions.open {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", nil, &loginData{Next: safeNext(r.URL.Query().Get("next"))})
}

// login handles POST /ui/login: a configured token opens a session.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.parseForm(w, r, nil) {
		return
	}
	next := safeNext(r.PostFormValue("next"))
	if h.sessions.open {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !sameOrigin(r) {
		h.refuse(w, r, nil)
		return
	}
	i := h.sessions.tokenIndex(r.PostFormValue("token"))
	if i < 0 {
		h.render(w, r, http.StatusUnauthorized, "login", nil, &loginData{Next: next, Error: "That token is not one of api.tokens."})
		return
	}
	value, _ := h.sessions.issue(i, h.store.Now())
	setCookie(w, r, cookieName, value, h.cfg.SessionTTL)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout handles POST /ui/logout. Deleting the cookie ends the session in
// this browser only, so the sign-out is recorded in the store for what is
// left of the session's life, and every process refuses a copy of the
// cookie from then on; if it cannot be recorded, the session goes on and the
// operator is told to try again. With no tokens configured the session is
// ended the same way, so that its CSRF token stops working, although a new
// session is anyone's for the asking.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := h.storeContext(r)
	defer cancel()
	if err := h.store.SignOut(ctx, s.id, s.end.Sub(h.store.Now())); err != nil {
		h.fail(w, r, s, err)
		return
	}
	setCookie(w, r, cookieName, "", 0)
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect inside the dashboard.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix
	}
	return next
}

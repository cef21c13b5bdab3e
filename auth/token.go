package auth

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tokens issues the tokens Authenticate returns and reads them back.
type Tokens interface {
	// Assign returns a new token naming user at auth revision rev.
	Assign(ctx context.Context, user string, rev uint64) (string, error)
	// Info reads a token; rev is the store's revision now, for tokens
	// that do not carry their own.
	Info(ctx context.Context, token string, rev uint64) (*Info, bool)
	// Invalidate forgets every token naming user, if tokens can be
	// forgotten (signed ones cannot: they run out).
	Invalidate(user string)
	// Disable forgets every token.
	Disable()
}

// NewTokens parses etcd's --auth-token option, "simple" or
// "jwt,pub-key=...,priv-key=...,sign-method=...,ttl=...". simpleTTL is
// how long an unused simple token lives (--auth-token-ttl).
func NewTokens(opts string, simpleTTL time.Duration) (Tokens, error) {
	kind, params, err := splitOptions(opts)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "simple":
		return newSimpleTokens(simpleTTL), nil
	case "jwt":
		return newJWTTokens(params)
	}
	return nil, fmt.Errorf("%w: unknown token type %q", ErrInvalidAuthOpts, kind)
}

// splitOptions splits "kind,k=v,k=v"; a malformed or repeated
// parameter is an error, as in etcd.
func splitOptions(s string) (string, map[string]string, error) {
	parts := strings.Split(s, ",")
	params := make(map[string]string)
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || strings.Contains(v, "=") {
			return "", nil, fmt.Errorf("%w: %q", ErrInvalidAuthOpts, p)
		}
		if _, dup := params[k]; dup {
			return "", nil, fmt.Errorf("%w: %q given twice", ErrInvalidAuthOpts, k)
		}
		params[k] = v
	}
	return parts[0], params, nil
}

// simpleTokens are etcd's "simple" tokens: random strings the member
// remembers, each living until it goes unused for ttl. They mean
// nothing to another member and are lost on restart, as etcd's are.
type simpleTokens struct {
	ttl time.Duration
	now func() time.Time
	seq atomic.Uint64

	mu     sync.Mutex
	tokens map[string]simpleToken
	// sweptAt is when the tokens that ran out were last swept, and
	// swept how many that left.
	sweptAt time.Time
	swept   int
}

type simpleToken struct {
	user    string
	expires time.Time
}

// DefaultTokenTTL is how long an unused simple token stays valid when
// none is given: etcd's default --auth-token-ttl.
const DefaultTokenTTL = 300 * time.Second

func newSimpleTokens(ttl time.Duration) *simpleTokens {
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	return &simpleTokens{ttl: ttl, now: time.Now, tokens: make(map[string]simpleToken)}
}

const tokenLetters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// Assign makes a token shaped like etcd's: 16 random letters, a dot and
// a sequence number.
func (t *simpleTokens) Assign(ctx context.Context, user string, rev uint64) (string, error) {
	b := make([]byte, 0, 16)
	var r [32]byte
	for len(b) < cap(b) {
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		for _, x := range r {
			// Bytes past the largest multiple of 52 would favour the
			// first letters: skip them.
			if int(x) < 256/len(tokenLetters)*len(tokenLetters) && len(b) < cap(b) {
				b = append(b, tokenLetters[int(x)%len(tokenLetters)])
			}
		}
	}
	token := fmt.Sprintf("%s.%d", b, t.seq.Add(1))
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	// The tokens that ran out are swept here, as tokens are made, but a
	// sweep reads every token: it runs once a ttl has passed since the
	// last, or once the tokens have doubled, so that a login costs a
	// constant share of it however many tokens the member holds, and
	// they stay within twice what the last sweep left and a ttl's logins.
	if now.Sub(t.sweptAt) >= t.ttl || len(t.tokens) >= 2*max(t.swept, 1024) {
		for k, v := range t.tokens {
			if now.After(v.expires) {
				delete(t.tokens, k)
			}
		}
		t.sweptAt, t.swept = now, len(t.tokens)
	}
	t.tokens[token] = simpleToken{user: user, expires: now.Add(t.ttl)}
	return token, nil
}

// Info names the token's user at the store's revision now: a simple
// token is as current as the store. Using a token extends its life.
func (t *simpleTokens) Info(ctx context.Context, token string, rev uint64) (*Info, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk, ok := t.tokens[token]
	if !ok {
		return nil, false
	}
	now := t.now()
	if now.After(tk.expires) {
		delete(t.tokens, token)
		return nil, false
	}
	tk.expires = now.Add(t.ttl)
	t.tokens[token] = tk
	return &Info{Username: tk.user, Revision: rev}, true
}

func (t *simpleTokens) Invalidate(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range t.tokens {
		if v.user == user {
			delete(t.tokens, k)
		}
	}
}

func (t *simpleTokens) Disable() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.tokens)
}

// InfoFromToken names the user of token. With auth off every token is
// ignored; with it on, a token that names nobody is ErrInvalidAuthToken.
func (s *Store) InfoFromToken(ctx context.Context, token string) (*Info, error) {
	s.mu.RLock()
	enabled, rev := s.enabled, s.rev
	s.mu.RUnlock()
	if !enabled {
		return nil, nil
	}
	ai, ok := s.tokens.Info(ctx, token, rev)
	if !ok {
		return nil, ErrInvalidAuthToken
	}
	return ai, nil
}

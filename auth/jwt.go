package auth

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwtTokens are signed tokens carrying the user, the auth revision they
// were issued at and an expiry. Any member with the key can read them,
// and a change to the auth state makes them old (ErrAuthOldRevision).
type jwtTokens struct {
	method jwt.SigningMethod
	// key signs; verify checks. A public key alone only verifies.
	key    any
	verify any
	ttl    time.Duration
}

// etcd's default ttl for jwt tokens.
const defaultJWTTTL = 5 * time.Minute

var errVerifyOnly = errors.New("auth: token signing attempted with verify-only key")

func newJWTTokens(params map[string]string) (*jwtTokens, error) {
	t := &jwtTokens{ttl: defaultJWTTTL}
	if s := params["ttl"]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%w: ttl: %w", ErrInvalidAuthOpts, err)
		}
		t.ttl = d
	}
	t.method = jwt.GetSigningMethod(params["sign-method"])
	if t.method == nil {
		return nil, fmt.Errorf("%w: sign-method %q", ErrInvalidAuthOpts, params["sign-method"])
	}
	var pub, priv []byte
	var err error
	if f := params["pub-key"]; f != "" {
		if pub, err = os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidAuthOpts, err)
		}
	}
	if f := params["priv-key"]; f != "" {
		if priv, err = os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidAuthOpts, err)
		}
	}
	if err := t.loadKeys(pub, priv); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidAuthOpts, err)
	}
	return t, nil
}

// loadKeys parses the PEM keys the signing method needs; given both, they
// must be a pair.
func (t *jwtTokens) loadKeys(pub, priv []byte) error {
	if len(pub) == 0 && len(priv) == 0 {
		return errors.New("missing key data")
	}
	var parsePub, parsePriv func([]byte) (any, error)
	switch t.method.(type) {
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		parsePub = func(b []byte) (any, error) { return jwt.ParseRSAPublicKeyFromPEM(b) }
		parsePriv = func(b []byte) (any, error) { return jwt.ParseRSAPrivateKeyFromPEM(b) }
	case *jwt.SigningMethodECDSA:
		parsePub = func(b []byte) (any, error) { return jwt.ParseECPublicKeyFromPEM(b) }
		parsePriv = func(b []byte) (any, error) { return jwt.ParseECPrivateKeyFromPEM(b) }
	case *jwt.SigningMethodEd25519:
		parsePub = func(b []byte) (any, error) { return jwt.ParseEdPublicKeyFromPEM(b) }
		parsePriv = func(b []byte) (any, error) { return jwt.ParseEdPrivateKeyFromPEM(b) }
	case *jwt.SigningMethodHMAC:
		// One shared secret both signs and verifies.
		if len(priv) == 0 {
			return errors.New("missing key data")
		}
		t.key, t.verify = priv, priv
		return nil
	default:
		return fmt.Errorf("unsupported signing method %s", t.method.Alg())
	}
	var pubKey, privKey any
	var err error
	if len(priv) > 0 {
		if privKey, err = parsePriv(priv); err != nil {
			return err
		}
	}
	if len(pub) > 0 {
		if pubKey, err = parsePub(pub); err != nil {
			return err
		}
	}
	if privKey == nil {
		t.verify = pubKey
		return nil
	}
	signer, ok := privKey.(crypto.Signer)
	if !ok {
		return fmt.Errorf("unsupported private key %T", privKey)
	}
	public := signer.Public()
	if pubKey != nil && !pubKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(public) {
		return errors.New("public and private keys do not match")
	}
	t.key, t.verify = privKey, public
	return nil
}

func (t *jwtTokens) Assign(ctx context.Context, user string, rev uint64) (string, error) {
	if t.key == nil {
		return "", errVerifyOnly
	}
	tk := jwt.NewWithClaims(t.method, jwt.MapClaims{
		"username": user,
		"revision": rev,
		"exp":      time.Now().Add(t.ttl).Unix(),
	})
	return tk.SignedString(t.key)
}

func (t *jwtTokens) Info(ctx context.Context, token string, rev uint64) (*Info, bool) {
	parsed, err := jwt.Parse(token, func(tk *jwt.Token) (any, error) {
		if tk.Method.Alg() != t.method.Alg() {
			return nil, errors.New("unexpected signing method")
		}
		return t.verify, nil
	})
	if err != nil || !parsed.Valid {
		return nil, false
	}
	claims, ok := parsed.Claims.(jwt.MapClaims)
	if !ok {
		return nil, false
	}
	user, ok := claims["username"].(string)
	if !ok {
		return nil, false
	}
	r, ok := claims["revision"].(float64)
	if !ok {
		return nil, false
	}
	return &Info{Username: user, Revision: uint64(r)}, true
}

// Signed tokens cannot be recalled; they run out, and the revision they
// carry goes old at the next change.
func (t *jwtTokens) Invalidate(string) {}
func (t *jwtTokens) Disable()          {}

package authcallout_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// A request the server signed with an expiry that has passed (it waited
// longer than the server's auth timeout before the callout read it) is
// refused, and the log says it was a time check, not an empty list.
func TestAnExpiredRequestIsRefusedAndTheLogSaysItExpired(t *testing.T) {
	v, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: "http://127.0.0.1:1", Audience: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	issuer, _ := nkeys.CreateAccount()
	var logs bytes.Buffer
	svc, err := authcallout.New(authcallout.Options{Issuer: issuer, Account: "FLEET", Verifier: v, Identities: mapIdentities{},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	serverKP, _ := nkeys.CreateServer()
	userKP, _ := nkeys.CreateUser()
	userPub, _ := userKP.PublicKey()
	rc := jwt.NewAuthorizationRequestClaims(userPub)
	rc.UserNkey = userPub
	rc.Server = jwt.ServerID{ID: "server-1", Name: "fleet"}
	rc.ConnectOptions.Token = "whatever"
	rc.Expires = time.Now().Add(-time.Minute).Unix()
	enc, err := rc.Encode(serverKP)
	if err != nil {
		t.Fatal(err)
	}
	if out := svc.Respond(context.Background(), []byte(enc), ""); out != nil {
		t.Fatalf("an expired request was answered: %q", out)
	}
	if got := logs.String(); !strings.Contains(got, "time check failed") || !strings.Contains(got, "auth timeout") {
		t.Fatalf("the refusal's log does not say the request expired:\n%s", got)
	}
}

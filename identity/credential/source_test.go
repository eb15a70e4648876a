package credential_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

func startProvider(t *testing.T, o devop.Options) *devop.Provider {
	t.Helper()
	p, err := devop.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func TestTheSourceCachesAndRefreshesBeforeExpiry(t *testing.T) {
	ctx := context.Background()
	p := startProvider(t, devop.Options{TokenLifetime: 9 * time.Minute})
	uid, _ := p.CreateMachineUser(ctx, "dev")
	kf, err := p.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	src, err := credential.New(ctx, credential.Options{Issuer: p.Issuer(), Key: kf, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	first, err := src.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		at    time.Time
		fresh bool
	}{
		{"a token far from expiry is served from the cache", first.Expiry.Add(-4 * time.Minute), false},
		{"a token within a third of its lifetime of expiry is replaced", first.Expiry.Add(-2 * time.Minute), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk.set(tc.at)
			got, err := src.Token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if fresh := got.IDToken != first.IDToken; fresh != tc.fresh {
				t.Fatalf("fresh token %v, want %v", fresh, tc.fresh)
			}
		})
	}
}

func TestAFailedGrantNeverLogsTheKey(t *testing.T) {
	ctx := context.Background()
	p := startProvider(t, devop.Options{})
	uid, _ := p.CreateMachineUser(ctx, "dev")
	kf, err := p.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	src, err := credential.New(ctx, credential.Options{Issuer: p.Issuer(), Key: kf, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveMachineKey(ctx, uid, kf.KeyID); err != nil {
		t.Fatal(err)
	}
	if tok := src.TokenHandler(5 * time.Second)(); tok != "" {
		t.Fatal("a token without a valid key")
	}
	_, err = src.Token(ctx)
	if !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("error %v, want ErrGrant", err)
	}
	line := strings.Split(kf.Key, "\n")[1]
	for where, text := range map[string]string{"log": logs.String(), "error": err.Error()} {
		if strings.Contains(text, "PRIVATE KEY") || strings.Contains(text, line) {
			t.Fatalf("the %s contains the private key", where)
		}
	}
	if !strings.Contains(logs.String(), "no id_token for NATS connect") {
		t.Fatalf("the failure is not logged: %s", logs.String())
	}
}

package dev

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"
)

// secrets are the NATS passwords and callout keys of one data folder,
// created on the first run and reused after (files of mode 0600 under
// <data>/secrets). None of them is ever logged.
type secrets struct {
	dir                                                         string
	calloutPassword, readerPassword, sysPassword, adminPassword string
	// presencePassword is fleet-presence's (ADR 0032).
	presencePassword string
	// idpToken opens the development provider's management API (`fleet
	// enroll --dev` reads it from idpTokenFile).
	idpToken     string
	issuer, xkey nkeys.KeyPair
}

// adminPasswordFile is the file holding the nats CLI user's password.
func (s *secrets) adminPasswordFile() string { return filepath.Join(s.dir, "admin.password") }

// idpTokenFile is the file holding the provider's management API token.
func (s *secrets) idpTokenFile() string { return filepath.Join(s.dir, idpTokenFileName) }

// providerStateFile is the development provider's state file: its
// machine users and their public keys (no private key), mode 0600, so that
// devices enrolled with it survive a restart.
func (s *secrets) providerStateFile() string { return filepath.Join(s.dir, providerStateFileName) }

// providerStateFileName is the provider's state file in the secrets
// folder.
const providerStateFileName = "idp-machine-users.json"

// idpTokenFileName is the provider's management API token file in the
// secrets folder.
const idpTokenFileName = "idp-admin.token"

func loadSecrets(dir string) (*secrets, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet dev: secrets folder: %w", err)
	}
	s := &secrets{dir: dir}
	for _, p := range []struct {
		file string
		dst  *string
	}{
		{"callout.password", &s.calloutPassword},
		{"reader.password", &s.readerPassword},
		{"callout-sys.password", &s.sysPassword},
		{"presence.password", &s.presencePassword},
		{"admin.password", &s.adminPassword},
		{idpTokenFileName, &s.idpToken},
	} {
		v, err := loadOrCreate(filepath.Join(dir, p.file), func() (string, error) {
			b := make([]byte, 24)
			if _, err := rand.Read(b); err != nil {
				return "", err
			}
			return hex.EncodeToString(b), nil
		})
		if err != nil {
			return nil, err
		}
		*p.dst = v
	}
	for _, k := range []struct {
		file   string
		create func() (nkeys.KeyPair, error)
		dst    *nkeys.KeyPair
	}{
		{"issuer.seed", nkeys.CreateAccount, &s.issuer},
		{"xkey.seed", nkeys.CreateCurveKeys, &s.xkey},
	} {
		seed, err := loadOrCreate(filepath.Join(dir, k.file), func() (string, error) {
			kp, err := k.create()
			if err != nil {
				return "", err
			}
			b, err := kp.Seed()
			return string(b), err
		})
		if err != nil {
			return nil, err
		}
		if *k.dst, err = nkeys.FromSeed([]byte(seed)); err != nil {
			return nil, fmt.Errorf("fleet dev: %s is not an nkey seed (delete it to get a new one): %w", filepath.Join(dir, k.file), err)
		}
	}
	return s, nil
}

// loadOrCreate reads a secret file, or writes a new value to it (0600, by an
// atomic rename) when it does not exist.
func loadOrCreate(path string, create func() (string, error)) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("fleet dev: %s is empty: delete it to get a new one", path)
		}
		return v, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("fleet dev: read %s: %w", path, err)
	}
	v, err := create()
	if err != nil {
		return "", fmt.Errorf("fleet dev: create %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("fleet dev: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("fleet dev: write %s: %w", path, err)
	}
	return v, nil
}

//go:build tools

// Package natscli pins the nats CLI used by the documentation recipe tests.
// It is a separate module so the CLI's dependencies never enter the product.
package natscli

import _ "github.com/nats-io/natscli/nats"

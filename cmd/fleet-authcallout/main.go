// Command fleet-authcallout runs the NATS auth callout (issue: Identity and the NATS auth callout). It is not implemented in this build: it exits
// with an error saying so rather than pretending to run.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-authcallout:", err)
		os.Exit(1)
	}
}

func run() error {
	return errors.New("not implemented yet: this build does not include the NATS auth callout (issue: Identity and the NATS auth callout)")
}

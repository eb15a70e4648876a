// Command fleet-updater runs the root updater. It is not implemented in this build: it exits
// with an error saying so rather than pretending to run.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-updater:", err)
		os.Exit(1)
	}
}

func run() error {
	return errors.New("not implemented yet: this build does not include the root updater")
}

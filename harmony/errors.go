package harmony

import (
	"errors"
	"fmt"
)

// ErrUsage means the command line is wrong; the message names the flag and
// the fix. harmony exits with status 2.
var ErrUsage = errors.New("usage")

// ErrManifest means the HarmonyApp is inconsistent (an unknown image, a
// missing name); the message names the field.
var ErrManifest = errors.New("invalid HarmonyApp")

// ErrMutableTag means deploy was given an image reference that can change
// under the same name (latest, or a tag other than dev-*).
var ErrMutableTag = errors.New("mutable image reference")

// usageError is an ErrUsage with a message.
func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

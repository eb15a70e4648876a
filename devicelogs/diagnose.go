package devicelogs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Diagnosis is a device's answer to a diagnose request, with the clock
// offset seen at its receipt.
type Diagnosis struct {
	events.DeviceDiagnosis
	// ClockOffset is the device's clock minus the control plane's when
	// the answer arrived (transit time included).
	ClockOffset time.Duration
}

// Diagnose asks a device for its diagnosis (r names the Device and who
// asks; no Deployment or service), authorized and audited like a log (the
// same permission: get devices/log).
func (rd *Reader) Diagnose(ctx context.Context, r Request, auth Authorizer) (Diagnosis, error) {
	s, err := rd.open(ctx, r, auth, true)
	if err != nil {
		return Diagnosis{}, err
	}
	defer s.Close()
	for {
		_, err := s.Next(ctx)
		if d := s.diagnosis; d != nil {
			return Diagnosis{DeviceDiagnosis: *d, ClockOffset: s.ClockOffset()}, nil
		}
		if errors.Is(err, io.EOF) {
			return Diagnosis{}, fmt.Errorf("%w: the device ended its answer without a diagnosis", ErrNoAnswer)
		}
		if err != nil {
			return Diagnosis{}, err
		}
	}
}

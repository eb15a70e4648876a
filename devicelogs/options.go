package devicelogs

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// Defaults of Options (ADR 0025, docs/security.md "Device logs").
const (
	// MaxChunk bounds one chunk as encoded: the agent sends at most this,
	// a reader refuses more.
	MaxChunk = 64 << 10
	// DefaultAnswerTimeout is how long the first chunk may take.
	DefaultAnswerTimeout = 10 * time.Second
	// DefaultKeepAlive is how often a following agent says it is there;
	// three of them without a chunk and the device is gone.
	DefaultKeepAlive = 5 * time.Second
	// DefaultMaxBytes bounds one stream's chunks together.
	DefaultMaxBytes = 32 << 20
	// DefaultRate and DefaultBurst bound one stream's bytes per second.
	DefaultRate  = 2 << 20
	DefaultBurst = 4 << 20
	// DefaultMaxFollow bounds how long one stream follows.
	DefaultMaxFollow = 30 * time.Minute
	// DefaultMaxStreamsPerDevice bounds the open streams of one device in
	// one Reader.
	DefaultMaxStreamsPerDevice = 4
	// queueChunks is how many received chunks a stream holds for its
	// consumer.
	queueChunks = 128
)

// Options configure a Reader. Conn and Store are required.
type Options struct {
	// Conn is a connection of the control-plane account (FLEET).
	Conn *nats.Conn
	// Store appends the logs commands (FLEET_COMMANDS) and the audit
	// records (FLEET_AUDIT).
	Store *events.Store
	// Logger; default discarded.
	Logger *slog.Logger
	// Metrics count cut-offs and open streams; nil: nothing counted.
	Metrics *Metrics
	// AnswerTimeout, KeepAlive, MaxBytes, Rate, Burst, MaxFollow and
	// MaxStreamsPerDevice are the bounds; zero: the Default of each.
	AnswerTimeout       time.Duration
	KeepAlive           time.Duration
	MaxBytes            int64
	Rate                int64
	Burst               int64
	MaxFollow           time.Duration
	MaxStreamsPerDevice int
	// Now is the control plane's clock (clock offsets); default time.Now.
	Now func() time.Time
}

// Validate checks the options, naming the field.
func (o Options) Validate() error {
	var errs []error
	if o.Conn == nil {
		errs = append(errs, errors.New("devicelogs: Options.Conn is required: a connection of the FLEET account"))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("devicelogs: Options.Store is required: it appends the commands and the audit records"))
	}
	for name, v := range map[string]int64{"AnswerTimeout": int64(o.AnswerTimeout), "KeepAlive": int64(o.KeepAlive), "MaxBytes": o.MaxBytes,
		"Rate": o.Rate, "Burst": o.Burst, "MaxFollow": int64(o.MaxFollow), "MaxStreamsPerDevice": int64(o.MaxStreamsPerDevice)} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("devicelogs: Options.%s is negative: give 0 for the default or a positive bound", name))
		}
	}
	if o.MaxFollow > events.MaxLogsFollow {
		errs = append(errs, fmt.Errorf("devicelogs: Options.MaxFollow %s is over %s, the most an agent follows", o.MaxFollow, events.MaxLogsFollow))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.AnswerTimeout == 0 {
		o.AnswerTimeout = DefaultAnswerTimeout
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Rate == 0 {
		o.Rate = DefaultRate
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	if o.MaxFollow == 0 {
		o.MaxFollow = DefaultMaxFollow
	}
	if o.MaxStreamsPerDevice == 0 {
		o.MaxStreamsPerDevice = DefaultMaxStreamsPerDevice
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

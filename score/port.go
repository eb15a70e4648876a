package score

import (
	"regexp"
	"strconv"
)

// Protocol is the transport of a published port.
type Protocol string

// Protocols. A mapping without one is TCP.
const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Port is a parsed port mapping.
type Port struct {
	// Host is the port published on the device, 1..65535.
	Host uint16
	// Container is the port inside the container, 1..65535.
	Container uint16
	// Protocol is TCP or UDP.
	Protocol Protocol
}

// portRE is the CRD's pattern of a port mapping; the numbers' range is
// checked after it, as the CRD's CEL rule does.
var portRE = regexp.MustCompile(`^([0-9]{1,5}):([0-9]{1,5})(/(tcp|udp))?$`)

// portFix is the fix of every malformed port mapping.
const portFix = "use host:container with numbers in 1..65535, optionally /tcp or /udp"

// ParsePort parses a port mapping "host:container", optionally followed by
// "/tcp" or "/udp" (default tcp): each number is 1 to 5 digits with a value
// in 1..65535. The error is a *FieldError (field "port") naming the value
// and the fix.
func ParsePort(p string) (Port, error) {
	m := portRE.FindStringSubmatch(p)
	if m == nil {
		return Port{}, &FieldError{Field: "port", Value: p, Fix: portFix}
	}
	host, err1 := strconv.ParseUint(m[1], 10, 16)
	ctr, err2 := strconv.ParseUint(m[2], 10, 16)
	if err1 != nil || err2 != nil || host == 0 || ctr == 0 {
		return Port{}, &FieldError{Field: "port", Value: p, Fix: portFix}
	}
	proto := TCP
	if m[4] != "" {
		proto = Protocol(m[4])
	}
	return Port{Host: uint16(host), Container: uint16(ctr), Protocol: proto}, nil
}

// ParsePorts parses every mapping with ParsePort; the first malformed one
// is the error.
func ParsePorts(ports []string) ([]Port, error) {
	var out []Port
	for _, p := range ports {
		pp, err := ParsePort(p)
		if err != nil {
			return nil, err
		}
		out = append(out, pp)
	}
	return out, nil
}

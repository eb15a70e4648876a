package score

import (
	"regexp"
	"strconv"
)

// MaxPublishedPorts is how many port mappings the services of a score
// publish at most together. The Deployment CRD's rule against a host port
// published twice compares every pair of mappings, so its cost grows with
// the square of their number; this bound keeps it within the API server's
// CEL cost budget.
const MaxPublishedPorts = 256

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
	switch {
	case err1 != nil || host == 0:
		return Port{}, &FieldError{Field: "port", Value: p, Fix: "host port " + m[1] + " is outside 1..65535: " + portFix}
	case err2 != nil || ctr == 0:
		return Port{}, &FieldError{Field: "port", Value: p, Fix: "container port " + m[2] + " is outside 1..65535: " + portFix}
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

// PortClashFix is the fix of a PortClash, for messages that name both
// mappings.
const PortClashFix = "publish each host port once per protocol (a port without /udp is tcp), or give one of them another host port"

// PortClash is a port mapping that publishes a host port with a protocol
// that an earlier mapping already publishes: Podman (and the agent's
// preflight) would refuse the second.
type PortClash struct {
	// Service and Mapping locate the mapping: services[Service].ports[Mapping].
	Service, Mapping int
	// FirstService and FirstMapping locate the earlier mapping.
	FirstService, FirstMapping int
	// Host and Protocol are the host port both publish.
	Host     uint16
	Protocol Protocol
}

// HostPortClashes returns, in order, every mapping of ports (ports[i] is the
// i-th service's list) that publishes a host port and protocol an earlier
// mapping, of the same service or an earlier one, already publishes. A
// mapping without a protocol is tcp ("8080:80" and "8080:81/tcp" clash;
// "8080:80/tcp" and "8080:80/udp" do not), leading zeros do not count, and a
// malformed mapping is skipped (ParsePort reports it).
func HostPortClashes(ports [][]string) []PortClash {
	type hostPort struct {
		host  uint16
		proto Protocol
	}
	type at struct{ service, mapping int }
	first := map[hostPort]at{}
	var out []PortClash
	for i, list := range ports {
		for j, p := range list {
			pp, err := ParsePort(p)
			if err != nil {
				continue
			}
			k := hostPort{pp.Host, pp.Protocol}
			if f, dup := first[k]; dup {
				out = append(out, PortClash{Service: i, Mapping: j, FirstService: f.service, FirstMapping: f.mapping, Host: pp.Host, Protocol: pp.Protocol})
				continue
			}
			first[k] = at{i, j}
		}
	}
	return out
}

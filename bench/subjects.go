package bench

import "strings"

// token returns the i-th dot-separated token of subject ("" when absent).
func token(subject string, i int) string {
	parts := strings.Split(subject, ".")
	if i < len(parts) {
		return parts[i]
	}
	return ""
}

// deviceIndex is i for DeviceName(i), a huge number for anything else.
func deviceIndex(dev string) int {
	s, ok := strings.CutPrefix(dev, "sim-")
	if !ok {
		return int(^uint(0) >> 1)
	}
	i := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return int(^uint(0) >> 1)
		}
		i = i*10 + int(r-'0')
	}
	return i
}

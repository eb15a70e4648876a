package kubelocal

import "time"

// SetPickPort replaces the port picker until restore is called.
func SetPickPort(f func() (int, error)) (restore func()) {
	pickPort = f
	return func() { pickPort = freePort }
}

// FreePort is freePort.
var FreePort = freePort

// StartEtcd starts etcd as Start does, with fresh certificates in pkiDir,
// and returns its client URL and a stop function.
func StartEtcd(bin, pkiDir, dataDir string, timeout time.Duration) (url string, stop func() error, err error) {
	pki, err := newEtcdPKI(pkiDir)
	if err != nil {
		return "", nil, err
	}
	e, err := startEtcd(bin, dataDir, pki, timeout)
	if err != nil {
		return "", nil, err
	}
	return e.URL, func() error { return e.stop(time.Minute) }, nil
}

package enroll

import "errors"

// ErrAlreadyEnrolled means a Device with that id exists: re-enroll it
// instead.
var ErrAlreadyEnrolled = errors.New("enroll: device is already enrolled (use re-enroll)")

// ErrNotEnrolled means no Device with that id exists.
var ErrNotEnrolled = errors.New("enroll: device is not enrolled")

// ErrKeyFileExists means the key file path exists and Overwrite is false.
var ErrKeyFileExists = errors.New("enroll: key file already exists")

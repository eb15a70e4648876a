// Package trimmed names the fields of a device's inventory the Device
// role cuts to the bounds of a Device (operator/devices, bounds.go): the
// values of the field label of fleet_device_reports_trimmed_total, which
// the metrics pre-create at zero. Imported by the roles of the operator
// only.
package trimmed

// Fields are the values of the field label of
// fleet_device_reports_trimmed_total: reported labels dropped, or an
// inventory string cut, or a reported time zone ignored.
var Fields = []string{"labels", "inventory.os", "inventory.arch", "inventory.kernel", "inventory.agentVersion", "inventory.timeZone"}

// Package hygiene holds repository-wide tests: every package has a doc
// comment, and the import rules of docs/adr/0001 and docs/architecture.md hold for the
// linked dependencies of each package and binary. It has no code of its own.
package hygiene

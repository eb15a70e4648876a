package operator

// SetRevisionChunkBytes makes revisions chunk their targets past n id bytes
// until the returned restore is called (0: the default).
func SetRevisionChunkBytes(n int) (restore func()) {
	old := revisionChunkBytes
	revisionChunkBytes = n
	return func() { revisionChunkBytes = old }
}

package slowlink

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Blob is an HTTP server on loopback serving one blob of random bytes
// (nothing compresses it) at /blob, Range requests included: the image a
// simulated device downloads through its Link in a benchmark.
type Blob struct {
	srv  *http.Server
	ln   net.Listener
	size int64
}

// ServeBlob starts a Blob of size bytes; Close stops it.
func ServeBlob(size int64) (*Blob, error) {
	if size <= 0 {
		return nil, fmt.Errorf("slowlink: a blob of %d bytes: give a size above 0", size)
	}
	blob := make([]byte, size)
	_, _ = rand.Read(blob)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slowlink: %w", err)
	}
	b := &Blob{ln: ln, size: size, srv: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "blob", time.Time{}, bytes.NewReader(blob))
	})}}
	go func() { _ = b.srv.Serve(ln) }()
	return b, nil
}

// Addr is the Blob's host:port: a Link's Target.
func (b *Blob) Addr() string { return b.ln.Addr().String() }

// Size is the blob's size in bytes.
func (b *Blob) Size() int64 { return b.size }

// Close stops the server.
func (b *Blob) Close() error { return b.srv.Close() }

// Fetch downloads a Blob of size bytes through the Link at addr (its
// Addr), resuming with a Range request after a reset, until it has every
// byte or ctx ends (then ctx's error). It returns how many bytes it
// received, resent ones excepted.
func Fetch(ctx context.Context, addr string, size int64) (int64, error) {
	var got int64
	for got < size {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/blob", nil)
		if err != nil {
			return got, fmt.Errorf("slowlink: %w", err)
		}
		req.Header.Set("Range", "bytes="+strconv.FormatInt(got, 10)+"-")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return got, ctx.Err()
			}
			continue // reset before the answer: try again
		}
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
			_ = resp.Body.Close()
			return got, fmt.Errorf("slowlink: GET /blob from byte %d through %s: %s", got, addr, resp.Status)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		got += n
	}
	return got, nil
}

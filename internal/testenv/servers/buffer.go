package servers

import (
	"bytes"
	"sync"
)

// BoundedBuffer keeps the first Max bytes written to it (a server's or a
// child process's output); it is safe for concurrent use.
type BoundedBuffer struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *BoundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.Max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *BoundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

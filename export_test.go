package lock

// QueuedScripts returns how many scripts wait in p's batcher for the next
// pipeline: a test that holds the round trips under way waits for its
// callers to be queued.
func QueuedScripts(p *RedisProvider) int {
	p.batch.mu.Lock()
	defer p.batch.mu.Unlock()
	return len(p.batch.queue)
}

// MemoryLen returns the number of the memory provider p's live records and
// counted names.
func MemoryLen(p Provider) int { return p.(*memoryProvider).stored() }

// IsMemory reports whether p is a provider of NewMemoryProvider.
func IsMemory(p Provider) bool {
	_, ok := p.(*memoryProvider)
	return ok
}

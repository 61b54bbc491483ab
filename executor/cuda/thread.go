package cuda

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/ckpt-go/ckpt/executor"
)

// thread runs functions on one goroutine locked to one OS thread. A CUDA
// context is current per OS thread, and goroutines migrate between
// threads, so every driver call of an executor goes through its thread:
// the primary context is made current there once and stays current.
type thread struct {
	calls chan func()
	done  chan struct{}
	once  sync.Once
	mu    sync.RWMutex // held for reading while submitting; for writing by stop
	stop  bool
}

// newThread starts the thread.
func newThread() *thread {
	t := &thread{calls: make(chan func()), done: make(chan struct{})}
	go t.loop()
	return t
}

func (t *thread) loop() {
	// The goroutine never unlocks: when it returns the runtime ends the OS
	// thread with it, and the context's binding to the thread goes too.
	runtime.LockOSThread()
	defer close(t.done)
	for f := range t.calls {
		f()
	}
}

// errStopped is returned by do after stop.
var errStopped = &Error{Kind: executor.ErrClosed, Msg: "the executor's driver thread has stopped"}

// do runs f on the thread and returns its error. A panic in f is returned
// as an error rather than killing the thread (and hanging every later
// caller).
func (t *thread) do(f func() error) error {
	t.mu.RLock()
	if t.stop {
		t.mu.RUnlock()
		return errStopped
	}
	res := make(chan error, 1)
	t.calls <- func() {
		defer func() {
			if r := recover(); r != nil {
				res <- &Error{Kind: executor.ErrDevice, Msg: fmt.Sprint("panic on the driver thread: ", r)}
			}
		}()
		res <- f()
	}
	t.mu.RUnlock()
	return <-res
}

// close stops the thread after the calls already submitted and waits for
// it to end. Later calls of do return an executor.ErrClosed error.
func (t *thread) close() {
	t.once.Do(func() {
		t.mu.Lock()
		t.stop = true
		close(t.calls)
		t.mu.Unlock()
		<-t.done
	})
}

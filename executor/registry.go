package executor

import (
	"cmp"
	"slices"
	"sync"
)

// Backend is an executor implementation that programs can choose at run
// time. Package executor/cpu registers "cpu"; executor/cuda registers
// "cuda".
type Backend struct {
	// Name is the backend's name ("cpu", "cuda"), as DeviceInfo.Kind.
	Name string
	// Priority orders NewBest's choice: higher first (cuda 100, cpu 0).
	Priority int
	// New starts an executor. When the backend cannot run here it returns
	// an error matching ErrUnavailable that says why (no driver, no
	// device).
	New func(opts ...Option) (Executor, error)
}

// KnownBackends are the backends of this module, by priority. Probe
// reports those a program was built without, so that a user sees why CUDA
// was not tried.
var KnownBackends = []string{"cuda", "cpu"}

var (
	regMu    sync.Mutex
	backends []Backend
)

// Register adds a backend. It is meant for init functions. A second
// backend of the same name, an empty name or a nil New is an ErrArgument
// error.
func Register(b Backend) error {
	regMu.Lock()
	defer regMu.Unlock()
	if b.Name == "" || b.New == nil {
		return &Error{Kind: ErrArgument, Op: "Register", Msg: "a backend needs a name and a New function"}
	}
	for _, o := range backends {
		if o.Name == b.Name {
			return &Error{Kind: ErrArgument, Op: "Register", Msg: "backend " + b.Name + " registered twice"}
		}
	}
	backends = append(backends, b)
	return nil
}

// Backends returns the registered backends, highest priority first (then
// by name).
func Backends() []Backend {
	regMu.Lock()
	defer regMu.Unlock()
	bs := slices.Clone(backends)
	slices.SortStableFunc(bs, func(a, b Backend) int {
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return bs
}

// Lookup returns the registered backend of the given name.
func Lookup(name string) (Backend, bool) {
	for _, b := range Backends() {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// Status is what Probe found for one backend.
type Status struct {
	Name string
	// Registered is false for a known backend the program was built
	// without.
	Registered bool
	// Info describes the device when the backend started.
	Info DeviceInfo
	// Err says why it did not start (nil when it did).
	Err error
}

// Available reports whether the backend started.
func (s Status) Available() bool { return s.Err == nil }

// Probe starts each registered backend with opts, reads its DeviceInfo and
// closes it; known backends that are not registered are listed with an
// ErrUnavailable error. The order is KnownBackends', then the other
// backends by priority.
func Probe(opts ...Option) []Status {
	var out []Status
	seen := map[string]bool{}
	for _, b := range Backends() {
		seen[b.Name] = true
		st := Status{Name: b.Name, Registered: true}
		ex, err := b.New(opts...)
		if err != nil {
			st.Err = err
		} else {
			st.Info = ex.Info()
			st.Err = ex.Close()
		}
		out = append(out, st)
	}
	var missing []Status
	for _, n := range KnownBackends {
		if !seen[n] {
			missing = append(missing, Status{Name: n, Err: notBuiltIn(n)})
		}
	}
	return mergeByPriority(out, missing)
}

// NewBest starts the first backend, by priority, that can run here. skipped
// lists the backends tried or known before it, with why each was not used
// (a known backend not built into the program included). It fails with
// ErrUnavailable only when no backend starts.
func NewBest(opts ...Option) (ex Executor, skipped []Status, err error) {
	seen := map[string]bool{}
	for _, b := range Backends() {
		seen[b.Name] = true
		e, err := b.New(opts...)
		if err == nil {
			return e, mergeByPriority(skipped, missingBefore(b.Name, seen)), nil
		}
		skipped = append(skipped, Status{Name: b.Name, Registered: true, Err: err})
	}
	skipped = mergeByPriority(skipped, missingBefore("", seen))
	return nil, skipped, &Error{Kind: ErrUnavailable, Msg: "no executor can run here (is package executor/cpu imported?)"}
}

func notBuiltIn(name string) error {
	return &Error{Kind: ErrUnavailable, Executor: name,
		Msg: "not built into this program (import github.com/ckpt-go/ckpt/executor/" + name + ")"}
}

// missingBefore returns the known, unregistered backends that come before
// name in KnownBackends (all of them for "").
func missingBefore(name string, seen map[string]bool) []Status {
	var out []Status
	for _, n := range KnownBackends {
		if n == name {
			break
		}
		if !seen[n] {
			out = append(out, Status{Name: n, Err: notBuiltIn(n)})
		}
	}
	return out
}

// mergeByPriority orders statuses as KnownBackends does, unknown names
// keeping their order after the known ones.
func mergeByPriority(a, b []Status) []Status {
	all := append(slices.Clone(a), b...)
	rank := func(n string) int {
		if i := slices.Index(KnownBackends, n); i >= 0 {
			return i
		}
		return len(KnownBackends)
	}
	slices.SortStableFunc(all, func(x, y Status) int { return cmp.Compare(rank(x.Name), rank(y.Name)) })
	return all
}

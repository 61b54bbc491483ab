package executor

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Model is a whole model's weights on one executor, keyed as the loader
// names them ("NAME", or "COMPONENT/NAME" in a pipeline). Close frees them.
type Model struct {
	ex      Executor
	names   []string
	weights map[string]*Weight
	release func() error

	mu     sync.Mutex
	closed bool
}

// NewModel gathers uploaded weights under their names (names[i] for
// weights[i]), for executors implementing UploadModel. Close frees each
// weight on ex and then calls release, when it is not nil.
func NewModel(ex Executor, names []string, weights []*Weight, release func() error) (*Model, error) {
	if len(names) != len(weights) {
		return nil, &Error{Kind: ErrArgument, Msg: fmt.Sprintf("%d names for %d weights", len(names), len(weights))}
	}
	m := &Model{ex: ex, names: slices.Clone(names), weights: make(map[string]*Weight, len(names)), release: release}
	for i, n := range names {
		if weights[i] == nil || weights[i].Data == nil {
			return nil, &Error{Kind: ErrArgument, Tensor: n, Msg: "nil weight"}
		}
		if _, dup := m.weights[n]; dup {
			return nil, &Error{Kind: ErrArgument, Tensor: n, Msg: "name given twice"}
		}
		m.weights[n] = weights[i]
	}
	return m, nil
}

// Names returns the weights' names in upload order.
func (m *Model) Names() []string { return slices.Clone(m.names) }

// Len returns the number of weights.
func (m *Model) Len() int { return len(m.names) }

// Weight returns the weight of the given name (ErrNotFound otherwise,
// ErrClosed after Close).
func (m *Model) Weight(name string) (*Weight, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, &Error{Kind: ErrClosed, Tensor: name, Msg: "model closed"}
	}
	w, ok := m.weights[name]
	if !ok {
		return nil, &Error{Kind: ErrNotFound, Tensor: name, Msg: "no weight of that name"}
	}
	return w, nil
}

// Bytes returns the device bytes of every weight (data and scales).
func (m *Model) Bytes() int64 {
	var n int64
	for _, w := range m.weights {
		n += w.Bytes()
	}
	return n
}

// Close frees every weight and releases what the executor kept for the
// model. A second Close does nothing.
func (m *Model) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	for _, n := range m.names {
		errs = append(errs, FreeWeight(m.ex, m.weights[n]))
	}
	if m.release != nil {
		errs = append(errs, m.release())
	}
	return errors.Join(errs...)
}

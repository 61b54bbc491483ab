package shard

import (
	"context"
	"fmt"
	"time"

	"github.com/ckpt-go/ckpt/sink"
)

// WithSlowCommit makes every step of a commit that changes what readers
// see (a file put in place, a removal, a hard link) wait d first, so that a
// test killing the writer at random instants often kills it between two of
// them.
func WithSlowCommit(d time.Duration) WriteOption { return withOps(&testOps{slow: d}) }

// withOps makes a write go through the folder sink wrapped by o.
func withOps(o *testOps) WriteOption { return func(c *writeConfig) { c.wrap = o.wrap } }

// testOps observes the steps of a commit that change what readers see: a
// file's Close (which renames or links it into place), a removal, a hard
// link. It counts them, can fail the failAt-th or every link, slows them
// down, and runs after after each.
type testOps struct {
	n, failAt int
	noLinks   bool
	slow      time.Duration
	after     func(op string)
}

func (o *testOps) do(op string, f func() error) error {
	time.Sleep(o.slow)
	o.n++
	if o.n == o.failAt {
		return fmt.Errorf("%s: %w", op, errInjected)
	}
	err := f()
	if o.after != nil {
		o.after(op)
	}
	return err
}

func (o *testOps) wrap(s sink.Sink) sink.Sink { return &opsSink{s.(sink.Linker), o} }

type opsSink struct {
	sink.Linker
	o *testOps
}

func (s *opsSink) Create(ctx context.Context, name string, exclusive bool) (sink.File, error) {
	f, err := s.Linker.Create(ctx, name, exclusive)
	if err != nil {
		return nil, err
	}
	return &opsFile{f.(sink.Patchable), s.o, name}, nil
}

func (s *opsSink) Remove(ctx context.Context, name string) error {
	return s.o.do("remove "+name, func() error { return s.Linker.Remove(ctx, name) })
}

func (s *opsSink) Link(ctx context.Context, from, to string) error {
	if s.o.noLinks {
		return errLinks
	}
	return s.o.do("link "+from+" "+to, func() error { return s.Linker.Link(ctx, from, to) })
}

// Sync forwards the folder's barrier (not counted: it changes nothing
// readers see).
func (s *opsSink) Sync(ctx context.Context) error {
	if sy, ok := s.Linker.(sink.Syncer); ok {
		return sy.Sync(ctx)
	}
	return nil
}

type opsFile struct {
	sink.Patchable
	o    *testOps
	name string
}

func (f *opsFile) Close() error { return f.o.do("close "+f.name, f.Patchable.Close) }

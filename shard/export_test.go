package shard

import "time"

// WithSlowCommit makes every rename, hard link, removal and folder sync of
// a commit wait d first, so that a test killing the writer at random
// instants often kills it between two of them.
func WithSlowCommit(d time.Duration) WriteOption { return withOps(slowOps{d: d}) }

type slowOps struct {
	osOps
	d time.Duration
}

func (o slowOps) rename(a, b string) error { time.Sleep(o.d); return o.osOps.rename(a, b) }
func (o slowOps) link(a, b string) error   { time.Sleep(o.d); return o.osOps.link(a, b) }
func (o slowOps) remove(a string) error    { time.Sleep(o.d); return o.osOps.remove(a) }
func (o slowOps) syncDir(d string) error   { time.Sleep(o.d); return o.osOps.syncDir(d) }

package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sync"
	"time"

	"github.com/ckpt-go/ckpt/sink"
)

// A save into a sink holds its checkpoint name with an IncompleteName
// marker until its manifest is written. A marker says who holds it (host,
// process, a random owner token) and when it last said so: the save
// rewrites it every markerRefresh, each time only while it is still the
// version it wrote itself (the store's If-Match), so that it notices at
// once when another save took the name over and stops. Another save of
// the name takes a marker over only when its holder is gone: a process of
// this host that no longer runs (a trainer restarted on its node after a
// kill takes over at once), or a marker not refreshed for markerStale (a
// holder on another host; hosts' clocks must agree to well within that).
// Two saves that find the name free both create the marker exclusively
// (If-None-Match): one of them fails. A marker holder confirms that the
// marker is still its own in one conditional write just before it writes
// the manifest that commits the checkpoint.
const (
	markerRefresh = 15 * time.Second
	markerStale   = 4 * markerRefresh
)

// errTakenOver is the cause a save's context is canceled with when
// another save replaced its marker.
var errTakenOver = errors.New("another save took this checkpoint name over (it found the marker unrefreshed)")

// holder is this process, as markers name it.
func holder() (host string, pid int) {
	host, _ = os.Hostname()
	return host, os.Getpid()
}

// stale reports whether the save that wrote m has stopped, and else says
// in words who holds the name.
func (m *incomplete) stale(now time.Time) (bool, string) {
	host, _ := holder()
	if m.Host != "" && m.Host == host && m.PID > 0 && !processRunning(m.PID) {
		return true, ""
	}
	age := now.Sub(m.At)
	if age > markerStale {
		return true, ""
	}
	who := "a save"
	if m.Host != "" {
		who = fmt.Sprintf("a save by process %d on %s", m.PID, m.Host)
	}
	return false, fmt.Sprintf("%s holds this name (its %s was refreshed %s ago; a save that stopped is taken over %s after its last refresh)",
		who, IncompleteName, age.Round(time.Second), markerStale)
}

// marker is the IncompleteName of a running save, which it keeps fresh.
type marker struct {
	dest sink.Sink
	name string // NAME/IncompleteName
	body incomplete

	mu      sync.Mutex
	version string // the version last written (on a Conditional sink)
	lost    bool   // another save replaced it
	stop    chan struct{}
	done    chan struct{}
}

// claimMarker writes the marker of the folder name in state saving: a new
// file (exclusive) when version is "" and replace false, else replacing
// the version of a stopped save's marker seen by checkNameFS. An error
// matching fs.ErrExist means another save wrote it first.
func claimMarker(ctx context.Context, dest sink.Sink, name string, seq int64, replace bool, version string) (*marker, error) {
	tok, err := randomToken()
	if err != nil {
		return nil, err
	}
	host, pid := holder()
	m := &marker{dest: dest, name: path.Join(name, IncompleteName),
		body: incomplete{Format: incompleteFormat, State: stateSaving, Seq: seq, Owner: tok, Host: host, PID: pid}}
	if err := m.write(ctx, !replace, version); err != nil {
		return nil, err
	}
	return m, nil
}

// write writes the marker with the time now, exclusively or replacing
// version, and records the version written.
func (m *marker) write(ctx context.Context, exclusive bool, version string) error {
	m.body.At = time.Now().UTC()
	b, err := json.Marshal(&m.body)
	if err != nil {
		return err
	}
	v, err := writeSinkFileVersion(ctx, m.dest, m.name, append(b, '\n'), exclusive, version)
	if err != nil {
		return err
	}
	m.version = v
	return nil
}

// refresh rewrites the marker while it is still the version this save
// wrote; it reports errTakenOver when it is not.
func (m *marker) refresh(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lost {
		return errTakenOver
	}
	err := m.write(ctx, m.version == "", m.version)
	if errors.Is(err, fs.ErrExist) {
		m.lost = true
		return errTakenOver
	}
	return err
}

// keep refreshes the marker every markerRefresh until release, and
// cancels the save (cancel, with errTakenOver) when another save took it
// over. A refresh that fails otherwise (the store unreachable for a
// moment) is tried again at the next tick.
func (m *marker) keep(ctx context.Context, cancel context.CancelCauseFunc) {
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.done)
		t := time.NewTicker(markerRefresh)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := m.refresh(ctx); errors.Is(err, errTakenOver) {
					cancel(errTakenOver)
					return
				}
			}
		}
	}()
}

// release stops refreshing the marker.
func (m *marker) release() {
	if m.stop != nil {
		close(m.stop)
		<-m.done
		m.stop = nil
	}
}

// confirm stops refreshing and proves, by one more conditional refresh,
// that the name is still this save's: the manifest written next commits
// the checkpoint.
func (m *marker) confirm(ctx context.Context) error {
	m.release()
	return m.refresh(ctx)
}

// owned reports whether the marker was not taken over as far as this
// save saw.
func (m *marker) owned() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.lost
}

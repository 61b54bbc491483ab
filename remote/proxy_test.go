package remote_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultProxy sits between a client and the S3 server and injects faults
// into the GETs of object data: throttling (503 SlowDown), connections
// reset in the middle of a body, and stalled bodies. The request's Host is
// kept, so that signatures still verify.
type faultProxy struct {
	t       *testing.T
	backend *url.URL
	srv     *httptest.Server
	tr      *http.Transport

	mu sync.Mutex
	// fault decides what happens to the n-th ranged GET (from 1).
	fault func(n int64) fault
	// once limits faults to the first request of each object range (a
	// retry of the same range, resumed or not, passes), so that loads
	// succeed for sure.
	once    bool
	faulted map[string]bool

	gets atomic.Int64
	hits map[fault]int

	// attributes, when set, answers GetObjectAttributes requests itself
	// (a store feature the test server lacks); others pass through.
	attributes http.HandlerFunc
}

type fault int

const (
	pass     fault = iota
	throttle       // 503 SlowDown
	reset          // send part of the body, then reset the connection
	stall          // send part of the body, then stop sending
	cut            // send part of the body, then close cleanly (short body)
)

func newFaultProxy(t *testing.T, endpoint string) *faultProxy {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, backend: u, tr: &http.Transport{}, hits: map[fault]int{}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(func() { p.srv.Close(); p.tr.CloseIdleConnections() })
	return p
}

func (p *faultProxy) URL() string { return p.srv.URL }

// setFault sets the faults of the ranged GETs from now on, counted from 1;
// with once, a range is faulted at most once.
func (p *faultProxy) setFault(f func(n int64) fault, once bool) {
	p.mu.Lock()
	p.fault, p.once, p.faulted = f, once, map[string]bool{}
	p.gets.Store(0)
	p.mu.Unlock()
}

func (p *faultProxy) count(f fault) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits[f]
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.URL.Query()["attributes"]; ok && p.attributes != nil && r.Method == http.MethodGet {
		p.attributes(w, r)
		return
	}
	f := pass
	if r.Method == http.MethodGet && r.Header.Get("Range") != "" {
		n := p.gets.Add(1)
		p.mu.Lock()
		if p.fault != nil {
			f = p.fault(n)
		}
		// A retry resumes where the body stopped: same object and last
		// byte, a later first byte. Keyed on those, a range and all its
		// resumptions are faulted at most once.
		rng := r.Header.Get("Range")
		key := r.URL.Path + " " + rng[strings.LastIndexByte(rng, '-')+1:]
		if f != pass && p.once {
			if p.faulted[key] {
				f = pass
			}
			p.faulted[key] = true
		}
		p.hits[f]++
		p.mu.Unlock()
	}
	if f == throttle {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.backend.Scheme, p.backend.Host
	out.Host = r.Host // the signature covers it
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	if f == pass || resp.StatusCode/100 != 2 {
		io.Copy(w, resp.Body)
		return
	}
	// Part of the body, then the fault.
	io.CopyN(w, resp.Body, max(resp.ContentLength/3, 1))
	w.(http.Flusher).Flush()
	switch f {
	case stall:
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return
	case cut, reset:
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok && f == reset {
			tc.SetLinger(0) // RST instead of FIN
		}
		conn.Close()
	}
}

package remote

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// retry runs attempt, each run bounded by the request timeout, until it
// succeeds, fails in a way that retrying cannot fix, or the retries run
// out; between runs it waits a random time up to a bound that doubles from
// the first backoff to the largest. A cancelled ctx ends it at once with
// ctx's error. The final error is an *Error naming the location of name,
// the range rng and the attempts made.
func (f *FS) retry(ctx context.Context, name, rng string, attempt func(ctx context.Context) error) error {
	for i := 0; ; i++ {
		if i > 0 {
			f.stats.retries.Add(1)
		}
		rctx, cancel := context.WithTimeout(ctx, f.opts.timeout)
		err := attempt(rctx)
		timedOut := rctx.Err() == context.DeadlineExceeded
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var re *Error
		if !errors.As(err, &re) {
			msg := "request failed"
			if timedOut {
				msg = "request timed out after " + f.opts.timeout.String()
			}
			re = &Error{Kind: ErrUnavailable, Msg: msg, Err: err, retry: true}
		} else if timedOut && !re.retry {
			re = &Error{Kind: ErrUnavailable, Msg: "request timed out after " + f.opts.timeout.String(), Err: err, retry: true}
		}
		if !re.retry || i >= f.opts.retries {
			e := *re
			if e.Location == "" {
				e.Location = f.be.where(name)
			}
			if e.Range == "" {
				e.Range = rng
			}
			e.Attempts = i + 1
			return &e
		}
		bound := f.opts.backoff << min(i, 30)
		if bound > f.opts.maxBackoff || bound <= 0 {
			bound = f.opts.maxBackoff
		}
		t := time.NewTimer(time.Duration(rand.Int64N(int64(bound)) + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ckpt-go/ckpt/internal/sysmem"
)

// progressBar draws one line of progress on a terminal: a bar, the bytes
// done and their total, the rate and the time left, redrawn in place at
// most every interval. It is not safe for concurrent use.
type progressBar struct {
	w        io.Writer
	width    int // of the bar itself
	interval time.Duration
	now      func() time.Time

	phase        string
	start, drawn time.Time
	startDone    int64
	lastLen      int
	active       bool
}

func newProgressBar(w io.Writer) *progressBar {
	return &progressBar{w: w, width: 24, interval: 100 * time.Millisecond, now: time.Now}
}

// update records progress in a phase; a new phase starts its own rate and
// line.
func (p *progressBar) update(phase string, done, total int64, force bool) {
	now := p.now()
	if phase != p.phase {
		if p.active {
			p.finish()
		}
		p.phase, p.start, p.startDone, p.drawn = phase, now, done, time.Time{}
	}
	if !force && !p.drawn.IsZero() && now.Sub(p.drawn) < p.interval && done < total {
		return
	}
	p.drawn = now
	p.active = true
	line := p.render(done, total, now.Sub(p.start))
	pad := ""
	if n := p.lastLen - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.lastLen = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
}

// render returns the line for done of total bytes after elapsed.
func (p *progressBar) render(done, total int64, elapsed time.Duration) string {
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	fill := int(frac * float64(p.width))
	bar := strings.Repeat("=", fill)
	if fill < p.width {
		bar += ">" + strings.Repeat(" ", p.width-fill-1)
	}
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done-p.startDone) / s
	}
	eta := "--:--"
	if rate > 0 && done < total {
		eta = clock(time.Duration(float64(total-done) / rate * float64(time.Second)))
	} else if done >= total {
		eta = clock(elapsed)
	}
	return fmt.Sprintf("%-7s [%s] %3.0f%% %s / %s  %s/s  %s", p.phase, bar, 100*frac,
		sysmem.FormatSize(done), sysmem.FormatSize(total), sysmem.FormatSize(int64(rate)), eta)
}

// finish ends the current line.
func (p *progressBar) finish() {
	if p.active {
		fmt.Fprintln(p.w)
	}
	p.active, p.lastLen = false, 0
}

// clock formats a duration as M:SS or H:MM:SS.
func clock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// progressBar draws export progress on a terminal (and nothing otherwise).
type progressBar struct {
	w      io.Writer
	total  uint64
	n      uint64
	start  time.Time
	last   time.Time
	active bool
}

// redrawEvery limits how often the bar is redrawn.
const redrawEvery = 100 * time.Millisecond

func newProgressBar(w io.Writer, total uint64) *progressBar {
	f, ok := w.(*os.File)
	active := ok && isTerminal(f)
	return &progressBar{w: w, total: total, start: time.Now(), active: active}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (p *progressBar) add(lines uint64) {
	p.n += lines
	if !p.active || time.Since(p.last) < redrawEvery {
		return
	}
	p.last = time.Now()
	p.draw()
}

func (p *progressBar) draw() {
	rate := float64(p.n) / max(time.Since(p.start).Seconds(), 1e-3)
	if p.total > 0 {
		frac := min(float64(p.n)/float64(p.total), 1)
		fill := int(frac * 30)
		fmt.Fprintf(p.w, "\r[%s%s] %3.0f%% %d/%d records  %.0f/s ", strings.Repeat("#", fill), strings.Repeat(".", 30-fill), frac*100, p.n, p.total, rate)
		return
	}
	fmt.Fprintf(p.w, "\r%d records  %.0f/s ", p.n, rate)
}

func (p *progressBar) finish() {
	if p.active {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

// countingReader reports how many lines pass through it.
type countingReader struct {
	r     io.Reader
	lines func(uint64)
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.lines(uint64(bytes.Count(b[:n], []byte{'\n'})))
	return n, err
}

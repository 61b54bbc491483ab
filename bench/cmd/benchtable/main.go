// Command benchtable reads `go test -bench` output on standard input and
// prints, as a Markdown table, the median of each benchmark over its runs
// (-count) and its ratio to the other implementations of the same case.
//
// Benchmark names are expected as Benchmark<Group>/<case>/impl=<impl>; one
// table row per group and case, one column per implementation, and a ratio
// column "ckpt ×" = peer time / ckpt time for every peer.
//
//	go test -run '^$' -bench . -count 5 . | go run ./cmd/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var line = regexp.MustCompile(`^(Benchmark[^\s]+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) MB/s)?`)

type key struct{ group, cas string }

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	ns := map[key]map[string][]float64{}
	mbs := map[key]map[string][]float64{}
	var order []key
	implSet := map[string]bool{}
	var impls []string
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		parts := strings.Split(m[1], "/")
		if len(parts) < 3 || !strings.HasPrefix(parts[len(parts)-1], "impl=") {
			continue
		}
		k := key{strings.TrimPrefix(parts[0], "Benchmark"), strings.Join(parts[1:len(parts)-1], "/")}
		impl := strings.TrimPrefix(parts[len(parts)-1], "impl=")
		if ns[k] == nil {
			ns[k], mbs[k] = map[string][]float64{}, map[string][]float64{}
			order = append(order, k)
		}
		if !implSet[impl] {
			implSet[impl] = true
			impls = append(impls, impl)
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		ns[k][impl] = append(ns[k][impl], v)
		if m[3] != "" {
			v, _ := strconv.ParseFloat(m[3], 64)
			mbs[k][impl] = append(mbs[k][impl], v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var peers []string
	for _, i := range impls {
		if i != "ckpt" && i != "copy" && i != "map" {
			peers = append(peers, i)
		}
	}
	groups := []string{}
	for _, k := range order {
		if !slices.Contains(groups, k.group) {
			groups = append(groups, k.group)
		}
	}
	for _, g := range groups {
		fmt.Fprintf(out, "\n**%s** (median of runs; time per op, MB/s where the benchmark sets bytes)\n\n", g)
		var cols []string
		for _, i := range impls {
			for _, k := range order {
				if k.group == g && ns[k][i] != nil && !slices.Contains(cols, i) {
					cols = append(cols, i)
				}
			}
		}
		// Baselines first, then ckpt, then the peers.
		rank := func(c string) int {
			switch c {
			case "copy", "map":
				return 0
			case "ckpt":
				return 1
			}
			return 2
		}
		slices.SortStableFunc(cols, func(a, b string) int { return rank(a) - rank(b) })
		fmt.Fprintf(out, "| case | %s |", strings.Join(cols, " | "))
		for _, p := range peers {
			fmt.Fprintf(out, " ckpt speed-up vs %s |", p)
		}
		fmt.Fprintln(out)
		fmt.Fprint(out, "| --- |"+strings.Repeat(" ---: |", len(cols)+len(peers))+"\n")
		for _, k := range order {
			if k.group != g {
				continue
			}
			fmt.Fprintf(out, "| %s |", k.cas)
			for _, c := range cols {
				t := median(ns[k][c])
				if t == 0 {
					fmt.Fprint(out, " — |")
					continue
				}
				if mb := median(mbs[k][c]); mb > 0 {
					fmt.Fprintf(out, " %s (%.0f MB/s) |", dur(t), mb)
				} else {
					fmt.Fprintf(out, " %s |", dur(t))
				}
			}
			for _, p := range peers {
				c, q := median(ns[k]["ckpt"]), median(ns[k][p])
				if c > 0 && q > 0 {
					fmt.Fprintf(out, " %.1f× |", q/c)
				} else {
					fmt.Fprint(out, " — |")
				}
			}
			fmt.Fprintln(out)
		}
	}
	return nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.1f ns", ns)
}

package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ckpt-go/ckpt/dtype"
)

func dtypesCommand() *command {
	c := &command{
		name:    "dtypes",
		summary: "list every dtype with its size, range and accepted spellings",
		help: `Lists the dtypes ckpt reads, writes and converts: every dtype of the
safetensors format plus any registered by the program. For each: the
safetensors name, bits per element, kind, lowest and highest finite value,
smallest positive value, whether it has Inf/NaN/-0, and the other spellings
that dtype.Parse accepts (framework names such as torch.float8_e4m3fn).

Example:
  ckpt dtypes
  ckpt dtypes --json | jq '.[] | select(.bits == 8)'`,
	}
	c.run = func(e *env, args []string) error {
		fs := newFlags(e, c)
		asJSON := fs.Bool("json", false, "print JSON instead of a table")
		pos, err := parseFlags(e, c, fs, args)
		if err != nil {
			return err
		}
		if len(pos) != 0 {
			return usageError{msg: "dtypes takes no arguments"}
		}
		return printDTypes(e, *asJSON)
	}
	return c
}

type dtypeRow struct {
	Name             string   `json:"name"`
	Bits             int      `json:"bits"`
	Kind             string   `json:"kind"`
	Min              float64  `json:"min"`
	Max              float64  `json:"max"`
	SmallestPositive float64  `json:"smallest_positive"`
	Inf              bool     `json:"inf"`
	NaN              bool     `json:"nan"`
	NegZero          bool     `json:"neg_zero"`
	Builtin          bool     `json:"builtin"`
	Aliases          []string `json:"aliases"`
	Doc              string   `json:"doc"`
}

func printDTypes(e *env, asJSON bool) error {
	var rows []dtypeRow
	for _, d := range dtype.All() {
		info := d.Info()
		rows = append(rows, dtypeRow{
			Name: info.Name, Bits: info.Bits, Kind: info.Kind.String(),
			Min: info.Min, Max: info.Max, SmallestPositive: info.SmallestPositive,
			Inf: info.HasInf, NaN: info.HasNaN, NegZero: info.HasNegZero,
			Builtin: info.Builtin, Aliases: append([]string{}, info.Aliases...), Doc: info.Doc,
		})
	}
	if asJSON {
		return e.printJSON(rows)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tBITS\tKIND\tMIN\tMAX\tSMALLEST>0\tINF/NAN/-0\tALIASES")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Bits, r.Kind,
			formatNumber(r.Min), formatNumber(r.Max), formatNumber(r.SmallestPositive),
			specials(r), strings.Join(r.Aliases, ", "))
	}
	return tw.Flush()
}

func specials(r dtypeRow) string {
	yn := func(b bool) string {
		if b {
			return "y"
		}
		return "-"
	}
	return yn(r.Inf) + "/" + yn(r.NaN) + "/" + yn(r.NegZero)
}

// formatNumber prints integers exactly and floats in the shortest form.
func formatNumber(v float64) string {
	if v == float64(int64(v)) && v > -1e15 && v < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/ckpt-go/ckpt/internal/setname"
	"github.com/ckpt-go/ckpt/internal/setwrite"
	"github.com/ckpt-go/ckpt/safetensors"
	"github.com/ckpt-go/ckpt/shard"
	"github.com/ckpt-go/ckpt/sink"
)

// takenMsg says what the files prev of the set of prefix and variant in
// a folder are, for a writer refused for them (single is the name of its
// single file), and that remedy replaces them: a set, or shards without
// an index or single file (a write that did not finish).
func takenMsg(prev []string, single, remedy string) string {
	if slices.ContainsFunc(prev, func(f string) bool { return f == single || strings.HasSuffix(f, ".json") }) {
		return fmt.Sprintf("holds weights of this set already (%s): %s replaces them", prev[0], remedy)
	}
	return fmt.Sprintf("holds shards of this set without their index (%s), left by a write that did not finish (killed?): no reader loads them; %s replaces them", prev[0], remedy)
}

// writeSinkSet writes a set through a sink.Sink with setwrite.Commit (see
// there for what readers see at every step), refusing a folder that holds
// a set already unless set.Replace, and returns its errors as *Error.
func writeSinkSet(ctx context.Context, set *setwrite.Set) (*setwrite.Result, error) {
	set.At = func(step string) { at("sink-" + step) }
	res, err := setwrite.Commit(ctx, set)
	if err != nil {
		return nil, setErr(ctx, set.Sink, set.Dir, setname.SingleName(set.Prefix, set.Variant), err)
	}
	return res, nil
}

// writeSinkFileSet writes one safetensors file through a sink
// (setwrite.WriteFile), returning its errors as *Error.
func writeSinkFileSet(ctx context.Context, dest sink.Sink, dir, name string, specs []safetensors.TensorSpec, write func(safetensors.TensorSpec, io.Writer) error, metadata map[string]string) error {
	if err := setwrite.WriteFile(ctx, dest, dir, name, specs, write, metadata); err != nil {
		return setErr(ctx, dest, dir, name, err)
	}
	return nil
}

// setErr is the *Error of a failure of setwrite.Commit or WriteFile of a
// set in the folder dir of dest (single: its single file's name).
func setErr(ctx context.Context, dest sink.Sink, dir, single string, err error) error {
	var e *setwrite.Error
	if !errors.As(err, &e) {
		return sinkErr(ctx, dest.Location(dir), -1, err)
	}
	where := dest.Location(path.Join(dir, e.Name))
	switch e.Stage {
	case setwrite.StageSpec:
		if strings.HasPrefix(e.Name, safetensors.ChecksumPrefix) {
			return &Error{Kind: ErrInvalid, Path: dest.Location(dir), Field: e.Name, Msg: "metadata: a checksum for a tensor that is not written"}
		}
		if e.Name == "" {
			return &Error{Kind: ErrInvalid, Path: dest.Location(dir), Msg: "header", Err: e.Err}
		}
		return &Error{Kind: ErrInvalid, Path: dest.Location(dir), Tensor: e.Name, Msg: "shape", Err: e.Err}
	case setwrite.StageList:
		return &Error{Kind: ErrTarget, Path: where, Msg: e.Msg, Err: e.Err}
	case setwrite.StageExists:
		return &Error{Kind: ErrExists, Path: dest.Location(dir), Msg: "the location " + takenMsg(e.Files, single, "the overwrite option")}
	case setwrite.StageSwitch:
		return &Error{Kind: ErrTarget, Path: where, Msg: "commit: " + e.Msg, Err: e.Err}
	}
	if errors.Is(e.Err, fs.ErrExist) {
		if strings.HasSuffix(e.Name, ".json") {
			return &Error{Kind: ErrConflict, Path: where, Msg: "another writer wrote or replaced the index meanwhile; it was not replaced, and this save's new shards were removed", Err: e.Err}
		}
		return &Error{Kind: ErrConflict, Path: where, Msg: "another writer wrote or replaced this file meanwhile; it was not replaced", Err: e.Err}
	}
	var te *setwrite.TensorError
	var le *setwrite.LengthError
	var ce *Error
	switch {
	case errors.As(e.Err, &te) && errors.As(te.Err, &ce):
		return ce // the data function's own error
	case errors.As(e.Err, &te):
		return sinkErr(ctx, where, -1, te.Err)
	case errors.As(e.Err, &le):
		return &Error{Kind: ErrTarget, Path: where, Tensor: le.Spec.Name, Msg: "write: " + le.Error()}
	}
	return sinkErr(ctx, where, -1, e.Err)
}

// maxShardOr is the shard size limit: n, or package shard's default.
func maxShardOr(n int64) int64 {
	if n > 0 {
		return n
	}
	return shard.DefaultMaxShardSize
}

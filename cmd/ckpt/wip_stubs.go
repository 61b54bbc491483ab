package main

import "errors"

// Temporary: replaced when the safetensors, shard and variant packages land.
func stub(name string) *command {
	return &command{name: name, summary: "(coming)", run: func(*env, []string) error { return errors.New("not yet") }}
}
func inspectCommand() *command  { return stub("inspect") }
func validateCommand() *command { return stub("validate") }
func resolveCommand() *command  { return stub("resolve") }
func demoCommand() *command     { return stub("demo") }

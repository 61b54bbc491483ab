package ckpt_test

import (
	"fmt"
	"testing"

	"github.com/ckpt-go/ckpt"
	"github.com/ckpt-go/ckpt/ckpttest"
	"github.com/ckpt-go/ckpt/dtype"
)

// TestPolicyDecide checks the precedence and the texts of Policy.Decide,
// with and without NarrowLinearOnly.
func TestPolicyDecide(t *testing.T) {
	rule := func(s string) ckpt.Rule {
		r, err := ckpt.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	to := ckpt.To
	fp8 := ckpt.Policy{
		Default:    to(dtype.F8_E4M3),
		Components: map[string]ckpt.Target{"vae": to(dtype.BF16), "te": ckpt.AsStored, "q": ckpt.Quantized, "x": to(dtype.F8_E5M2)},
		Rules:      []ckpt.Rule{rule("**.bias=F32"), rule("vae/conv.weight=F8_E4M3"), rule("ids=F32")},
	}
	type tc struct {
		comp, name string
		stored     dtype.DType
		quantized  bool
		shape      []int64
		want       string // target
		rule       string
		wantLinear string // with NarrowLinearOnly; "" when the same
		ruleLinear string
	}
	w2 := []int64{64, 32}
	cases := []tc{
		// Rules first, whatever the tensor is and whatever NarrowLinearOnly says.
		{"", "layers.0.attn.bias", dtype.F32, false, []int64{64}, "F32", "rule 1 **.bias=F32", "", ""},
		{"vae", "conv.weight", dtype.F32, false, []int64{8}, "F8_E4M3", "rule 2 vae/conv.weight=F8_E4M3", "", ""},
		{"te", "conv.weight", dtype.F32, false, []int64{8}, "stored", `component "te"=stored`, "", ""},
		{"", "ids", dtype.I64, false, []int64{4}, "F32", "rule 3 ids=F32", "", ""},
		// The component's target over the default.
		{"vae", "decoder.norm.weight", dtype.F32, false, []int64{64}, "BF16", `component "vae"=BF16`, "", ""},
		{"vae", "decoder.proj.weight", dtype.F32, false, w2, "BF16", `component "vae"=BF16`, "", ""},
		// Targets that are not dtypes apply to every tensor.
		{"te", "pos", dtype.I64, false, []int64{4}, "stored", `component "te"=stored`, "", ""},
		{"q", "proj.weight", dtype.F8_E4M3, true, w2, "quantized", `component "q"=quantized`, "", ""},
		{"q", "norm.weight", dtype.F32, false, []int64{64}, "quantized", `component "q"=quantized`, "", ""},
		// Integer and bool tensors keep their dtype.
		{"", "position_ids", dtype.I64, false, []int64{1, 4}, "stored", "integer tensor: default F8_E4M3 not applied", "", ""},
		{"vae", "mask", dtype.BOOL, false, []int64{4}, "stored", `bool tensor: component "vae"=BF16 not applied`, "", ""},
		{"x", "counts", dtype.U8, false, w2, "stored", `integer tensor: component "x"=F8_E5M2 not applied`, "", ""},
		// A quantized weight is not an integer tensor.
		{"", "layers.0.mlp.up_proj.weight", dtype.F4, true, w2, "F8_E4M3", "default F8_E4M3", "", ""},
		// An 8-bit default: on a norm, an embedding, an output head, a
		// 1-D weight, a 2-D linear weight, and through a component.
		{"", "model.norm.weight", dtype.BF16, false, []int64{64}, "F8_E4M3", "default F8_E4M3",
			"stored", "not a linear layer's 2-D weight: default F8_E4M3 not applied"},
		{"", "model.layers.0.input_layernorm.weight", dtype.BF16, false, w2, "F8_E4M3", "default F8_E4M3",
			"stored", "not a linear layer's 2-D weight: default F8_E4M3 not applied"},
		{"", "model.embed_tokens.weight", dtype.BF16, false, w2, "F8_E4M3", "default F8_E4M3",
			"stored", "not a linear layer's 2-D weight: default F8_E4M3 not applied"},
		{"", "lm_head.weight", dtype.BF16, false, w2, "F8_E4M3", "default F8_E4M3",
			"stored", "not a linear layer's 2-D weight: default F8_E4M3 not applied"},
		{"", "model.layers.0.mlp.proj.weight", dtype.BF16, false, []int64{64}, "F8_E4M3", "default F8_E4M3",
			"stored", "not a linear layer's 2-D weight: default F8_E4M3 not applied"},
		{"", "model.layers.0.mlp.proj.scale", dtype.BF16, false, w2, "F8_E4M3", "default F8_E4M3",
			"stored", "not a linear layer's 2-D weight: default F8_E4M3 not applied"},
		{"", "model.layers.0.mlp.up_proj.weight", dtype.BF16, false, w2, "F8_E4M3", "default F8_E4M3", "", ""},
		{"x", "model.norm.weight", dtype.F32, false, []int64{64}, "F8_E5M2", `component "x"=F8_E5M2`,
			"stored", `not a linear layer's 2-D weight: component "x"=F8_E5M2 not applied`},
		{"x", "attn.q_proj.weight", dtype.F32, false, w2, "F8_E5M2", `component "x"=F8_E5M2`, "", ""},
	}
	for _, linear := range []bool{false, true} {
		p := fp8
		p.NarrowLinearOnly = linear
		for _, c := range cases {
			want, rule := c.want, c.rule
			if linear && c.wantLinear != "" {
				want, rule = c.wantLinear, c.ruleLinear
			}
			d := p.Decide(c.comp, c.name, c.stored, c.quantized, c.shape)
			if d.Target.String() != want || d.Rule != rule {
				t.Errorf("NarrowLinearOnly=%v %s/%s %s%v: %s by %q, want %s by %q", linear, c.comp, c.name, c.stored, c.shape, d.Target, d.Rule, want, rule)
			}
		}
	}

	// A 16-bit default is not limited by NarrowLinearOnly; with no target
	// at all every tensor is as stored.
	wide := ckpt.Policy{Default: ckpt.To(dtype.BF16), NarrowLinearOnly: true}
	if d := wide.Decide("", "model.norm.weight", dtype.F32, false, []int64{64}); d.Target.String() != "BF16" || d.Rule != "default BF16" {
		t.Errorf("16-bit default on a norm: %s by %q", d.Target, d.Rule)
	}
	var none ckpt.Policy
	for _, linear := range []bool{false, true} {
		none.NarrowLinearOnly = linear
		if d := none.Decide("", "w.weight", dtype.F32, false, w2); d.Target != ckpt.AsStored || d.Rule != "no target: as stored" {
			t.Errorf("no target: %s by %q", d.Target, d.Rule)
		}
	}
	// A component without a target of its own falls back to the default.
	if d := fp8.Decide("other", "model.norm.weight", dtype.F32, false, []int64{64}); d.Rule != "default F8_E4M3" {
		t.Errorf("unknown component: %q", d.Rule)
	}
	// A rule with a note decides as any rule, and its decision gives the
	// note (as convert's rule that keeps a VAE out of an FP8 default).
	noted := fp8
	noted.Rules = append(noted.Rules[:len(noted.Rules):len(noted.Rules)],
		ckpt.Rule{Component: "other", Pattern: ckpt.MustParsePattern("**"), Target: ckpt.AsStored, Note: "kept: a VAE"})
	if d := noted.Decide("other", "decoder.proj.weight", dtype.F32, false, w2); d.Target != ckpt.AsStored || d.Rule != "kept: a VAE" {
		t.Errorf("noted rule: %s by %q", d.Target, d.Rule)
	}
	if d := noted.Decide("other", "decoder.proj.bias", dtype.F32, false, []int64{64}); d.Rule != "rule 1 **.bias=F32" {
		t.Errorf("an earlier rule: %q", d.Rule)
	}
}

func TestLinearWeight(t *testing.T) {
	for _, c := range []struct {
		name  string
		shape []int64
		want  bool
	}{
		{"model.layers.0.self_attn.q_proj.weight", []int64{8, 8}, true},
		{"blocks.3.ff.net.2.weight", []int64{8, 8}, true},
		{"model.layers.0.self_attn.q_proj.weight", []int64{8}, false},
		{"model.layers.0.self_attn.q_proj.weight", []int64{8, 8, 3, 3}, false},
		{"model.layers.0.self_attn.q_proj.bias", []int64{8, 8}, false},
		{"model.embed_tokens.weight", []int64{8, 8}, false},
		{"transformer.wte.weight", []int64{8, 8}, false},
		{"transformer.wpe.weight", []int64{8, 8}, false},
		{"shared.weight", []int64{8, 8}, false},
		{"lm_head.weight", []int64{8, 8}, false},
		{"gpt_neox.embed_out.weight", []int64{8, 8}, false},
		{"model.layers.0.post_attention_LayerNorm.weight", []int64{8, 8}, false},
		{"transformer.h.0.ln_1.weight", []int64{8, 8}, false},
		{"transformer.ln.weight", []int64{8, 8}, false},
		// Embedding tables by other names (T5's position biases).
		{"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", []int64{32, 8}, false},
		{"model.layers.0.global_relative_attention_bias.weight", []int64{32, 8}, false},
		{"attn.rel_pos_emb.weight", []int64{32, 8}, false},
		{"quantizer.codebook.weight", []int64{32, 8}, false},
		{"encoder.block.0.layer.0.SelfAttention.q.weight", []int64{8, 8}, true},
		{"down_blocks.0.resnets.0.time_emb_proj.weight", []int64{8, 8}, true},
	} {
		if got := ckpt.LinearWeight(c.name, c.shape); got != c.want {
			t.Errorf("LinearWeight(%q, %v) = %v, want %v", c.name, c.shape, got, c.want)
		}
	}
}

// An FP8 default that, as package convert applies it, narrows only the
// weights of linear layers; a rule keeps the biases in F32.
func ExamplePolicy_Decide() {
	p := ckpt.Policy{
		Default:          ckpt.To(dtype.F8_E4M3),
		Rules:            []ckpt.Rule{{Pattern: ckpt.MustParsePattern("**.bias"), Target: ckpt.To(dtype.F32)}},
		NarrowLinearOnly: true,
	}
	for _, t := range []struct {
		name   string
		stored dtype.DType
		shape  []int64
	}{
		{"model.layers.0.mlp.up_proj.weight", dtype.BF16, []int64{1024, 256}},
		{"model.layers.0.mlp.up_proj.bias", dtype.BF16, []int64{1024}},
		{"model.norm.weight", dtype.BF16, []int64{256}},
		{"model.embed_tokens.weight", dtype.BF16, []int64{32000, 256}},
		{"position_ids", dtype.I64, []int64{1, 512}},
	} {
		d := p.Decide("", t.name, t.stored, false, t.shape)
		fmt.Printf("%s: %s (%s)\n", t.name, d.Target, d.Rule)
	}
	// Output:
	// model.layers.0.mlp.up_proj.weight: F8_E4M3 (default F8_E4M3)
	// model.layers.0.mlp.up_proj.bias: F32 (rule 1 **.bias=F32)
	// model.norm.weight: stored (not a linear layer's 2-D weight: default F8_E4M3 not applied)
	// model.embed_tokens.weight: stored (not a linear layer's 2-D weight: default F8_E4M3 not applied)
	// position_ids: stored (integer tensor: default F8_E4M3 not applied)
}

// The loader applies the policy as given: WithPolicy keeps
// NarrowLinearOnly, and the plan says what each tensor became and why.
func TestOpenNarrowLinearOnly(t *testing.T) {
	path := ckpttest.File(t, ckpttest.Tensors(t,
		"model.layers.0.mlp.up_proj.weight:BF16[16,8] model.layers.0.mlp.up_proj.bias:BF16[16] model.norm.weight:BF16[8] model.embed_tokens.weight:BF16[32,8] ids:I64[4]")...)
	plan := func(opts ...ckpt.Option) map[string]ckpt.TensorPlan {
		t.Helper()
		m, err := ckpt.Open(path, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		p, err := m.Plan()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]ckpt.TensorPlan{}
		for _, c := range p.Components {
			for _, tp := range c.Tensors {
				out[tp.Name] = tp
			}
		}
		return out
	}
	fp8 := ckpt.To(dtype.F8_E4M3)
	const notLinear = "not a linear layer's 2-D weight: default F8_E4M3 not applied"
	for _, c := range []struct {
		what string
		opts []ckpt.Option
		want map[string][2]string // dtype, rule
	}{
		{"WithDType", []ckpt.Option{ckpt.WithDType(fp8)}, map[string][2]string{
			"model.layers.0.mlp.up_proj.weight": {"F8_E4M3", "default F8_E4M3"},
			"model.layers.0.mlp.up_proj.bias":   {"F8_E4M3", "default F8_E4M3"},
			"model.norm.weight":                 {"F8_E4M3", "default F8_E4M3"},
			"model.embed_tokens.weight":         {"F8_E4M3", "default F8_E4M3"},
			"ids":                               {"I64", "integer tensor: default F8_E4M3 not applied"},
		}},
		{"WithPolicy NarrowLinearOnly", []ckpt.Option{ckpt.WithPolicy(ckpt.Policy{Default: fp8, NarrowLinearOnly: true})}, map[string][2]string{
			"model.layers.0.mlp.up_proj.weight": {"F8_E4M3", "default F8_E4M3"},
			"model.layers.0.mlp.up_proj.bias":   {"BF16", notLinear},
			"model.norm.weight":                 {"BF16", notLinear},
			"model.embed_tokens.weight":         {"BF16", notLinear},
			"ids":                               {"I64", "integer tensor: default F8_E4M3 not applied"},
		}},
	} {
		got := plan(c.opts...)
		for name, w := range c.want {
			if tp := got[name]; tp.DType != w[0] || tp.Rule != w[1] {
				t.Errorf("%s: %s loads as %s by %q, want %s by %q", c.what, name, tp.DType, tp.Rule, w[0], w[1])
			}
		}
	}
}

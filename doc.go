// Package ckpt is the loader: it gives a Go program a model's weights in the
// dtypes it asks for, within the memory it has.
//
//	m, err := ckpt.Open("pipeline/", // a file, an index, a component folder or a pipeline root
//		ckpt.WithVariant("fp8"),
//		ckpt.WithComponentDType("transformer", ckpt.AsStored),        // stays FP8
//		ckpt.WithComponentDType("image_encoder", ckpt.To(dtype.F32)), // must be F32
//		ckpt.WithRules(ckpt.KeepNormsAndBiasesF32()...),
//		ckpt.WithBudget(24<<30))
//	plan, err := m.Plan()          // from headers only: bytes, decisions, fits?
//	w, err := m.Load(ctx)          // refuses with a *BudgetError before allocating
//	t, err := w.Tensor("transformer/blocks.0.attn.qkv.weight")
//
// # Layouts
//
// Open accepts a single safetensors file, a shard index, a component folder
// (transformers or diffusers naming, current or legacy, sharded or single,
// with precision variants resolved by package variant so that a .bf16 file
// is never mixed with F32 shards) or a pipeline root with model_index.json.
// A file or folder is a model with one component, named after its folder.
// A PyTorch checkpoint (pytorch_model.bin, .pt, .pth, .ckpt, a
// *.bin.index.json set, or a folder or pipeline component whose weights
// for the variant are PyTorch ones only, pytorch_model.fp16.bin and the
// like, named and chosen by package variant's rules) is opened through
// package torch, which executes nothing, and loads like any other: read
// with pread, verified against its storage records' CRC-32 (see
// Integrity); a view that is not
// contiguous (a transposed weight) is read from its file once into memory
// that serves all its pieces, which the plan's peak counts. Until a load,
// Open reads nothing but headers (a PyTorch file's zip directory and its
// pickled state dict), indexes and the components' config.json and
// hf_quant_config.json.
//
// # Dtype policy
//
// Each tensor's target is decided by, in order: the first matching Rule
// (a Pattern over the dotted name, optionally limited to one component),
// the component's target, the default target, and otherwise the stored
// dtype. Integer, bool and complex tensors are cast only by a rule that
// matches them. A target is a dtype (To), AsStored, or Quantized (a scaled
// low-precision weight kept narrow with its scales attached). The Plan
// records which rule decided each tensor.
//
// # Scaled low-precision weights
//
// Package quant detects DeepSeek block FP8, compressed-tensors FP8 and
// NVFP4, ModelOpt FP8 and NVFP4, MXFP4 (gpt-oss), FBGEMM row-wise FP8 and
// ComfyUI scaled FP8 from tensor names and configs. The loader shows such a
// weight under its logical name and shape (P.weight, or P for MXFP4
// P_blocks) with its element type as the stored dtype; a float target wider
// than (or different from) that type dequantizes it, rounding the exact
// product once; AsStored, Quantized or the element type itself keeps it
// quantized with Tensor.Scales. The scales are consumed (see
// WithScaleTensors). Tensors that look like scales but that no layout
// explains are listed in the plan, never guessed.
//
// # Memory
//
// Plan reports, per component and in total, the resident bytes after the
// load (zero-copy mapped bytes plus owned bytes) and the peak of the load
// (resident plus at most the staging allowance, 64 MiB by default). Without
// WithBudget the budget is what the process can really get: the smaller of
// MemAvailable and the cgroup's limit minus its usage. A load whose peak
// does not fit is refused before anything is allocated, with a message that
// says by how much and which targets would fit. A load never holds two
// copies of a tensor: each converted piece is read once (from the mapping,
// or into a small staging buffer with pread) and written once into its
// output, which lives in an Arena outside the Go heap.
//
// # Tensor parallelism
//
// WithRank(rank, world, splits...) makes a process load only its part of
// every tensor a Split matches ("**.q_proj.weight" along dimension 0 for
// column-parallel weights, "**.o_proj.weight" along dimension 1 for
// row-parallel ones; the others are replicated):
//
//	m, err := ckpt.Open("llama/", ckpt.WithDType(ckpt.To(dtype.BF16)), ckpt.WithRank(rank, 8,
//		ckpt.Split{Pattern: ckpt.MustParsePattern("**.q_proj.weight"), Dim: 0},
//		ckpt.Split{Pattern: ckpt.MustParsePattern("**.o_proj.weight"), Dim: 1}))
//
// Parts are numpy.array_split's ([safetensors.SplitBounds]): sizes that world does not
// divide are fine. A part is read as the byte ranges that hold it,
// computed from the shape and row-major strides and coalesced
// ([safetensors.SliceRanges]): one range for dimension 0, one per row for dimension 1,
// so each of N ranks reads about 1/N of a split tensor's bytes. The
// policy applies to the part; a dimension-0 part loaded as stored from a
// mapping is a zero-copy view; Tensor.Split says which part was loaded.
// The plan counts parts, not tensors, in the resident bytes, the peak and
// the budget, and shows what each rank reads: ReadBytes per tensor,
// component and in total, and the byte ranges of the files
// (TensorPlan.Ranges; [safetensors.Coalesce] merges them into requests). Scaled
// low-precision weights split on their scale blocks, their scales sliced
// with their data (kept quantized) or applied to the rows read
// (dequantized, where a dimension-0 part may start inside a block);
// anything else that cannot be split is ErrOption at Open, naming the
// tensor ("split: ...").
//
// # Reading
//
// Tensors loaded as stored are zero-copy views of the mapping; the others
// are converted by all workers in pieces of 4 MiB, in file order. On network
// filesystems (NFS, SMB, FUSE, Lustre, ...) the default read strategy is
// pread instead of mmap; the plan says which was chosen and why. Each
// loaded Tensor's Location says where its bytes live (file, offset, length,
// or owned memory) so that an executor can read them from the file itself.
//
// # One load path
//
// Open decides, once, how every tensor loads: Model.Items returns those
// decisions as typed values (an Item: the logical name, stored and target
// dtypes, the Action — view, read, convert, dequantize or keep quantized —
// this rank's part, the layout of a quantized part, and the Parts of the
// stored tensors it reads, which read through the model's own files). A
// whole tensor is the part [0, n) of itself, so split and unsplit tensors
// load through the same stages. Load and LoadTensor produce the items, Plan
// renders them, and the executors' UploadModel consume them (package
// executor/cuda reads each Part into its staging ring and converts or
// dequantizes on the device; where a part's bytes are not a weight of
// their own — a dequantized part starting inside a scale block — it takes
// the loader's bytes, Item.Produce). A backend of its own does the same.
//
// # Integrity
//
// Files written by ckpt name a CRC-32C of every tensor's stored bytes in
// their headers (safetensors.ChecksumPrefix). The one load path verifies
// them as the bytes pass through the reads it already does — Load,
// LoadTensor, Item.Produce and Part.ReadAt, and so the executors' uploads
// — with the pieces of a tensor summed in parallel and combined
// (verify.go says how, and what views and rank parts cost). A damaged
// tensor is a *safetensors.ChecksumError (errors.Is(err, ErrChecksum))
// naming the file, the tensor and its bytes, and nothing of the load is
// handed out. WithVerify chooses: VerifyPresent (the default) verifies
// every tensor of a file that names checksums, VerifyAlways also refuses
// files that name none, VerifyNever checks nothing. Zero-copy views,
// which a load does not read, are verified by a pass over their bytes
// before Load returns them; WithViewCheck(ViewCheckOnRead) hands them out
// unverified instead, for a caller that reads every byte anyway to have
// them verified by that read (Tensor.Chunks; Tensor.Check and
// Weights.Check for the rest). The plan says what will be verified, and
// when (Plan.Verify, TensorPlan.Verify).
//
// PyTorch checkpoints name no checksum per tensor, but their zip archive
// records the CRC-32 of every storage record: a tensor whose bytes are its
// whole record's (most weights) is verified against it in the same way,
// and a view of its storage (part of it, transposed, or byte-swapped from
// a big-endian archive) is loaded unverified with VerifyPresent ("not
// verified: a view of its storage") and verified with VerifyAlways by
// reading its whole record (verify.go).
//
// # Object storage, HTTP and other file systems
//
// Where the bytes come from is package source's business. Open also takes
// locations SCHEME://... of sources registered with [source.Register]:
// importing package remote registers s3:// (folders, pipelines, indexes
// and files in S3-compatible stores, read with the caller's *s3.Client)
// and https:// (files and indexes). A location that cannot be opened is
// an ErrResolve wrapping the source's error ([source.ErrNoSource] for a
// scheme nothing registered). WithFS opens a checkpoint from any fs.FS
// instead (remote.NewS3FS, os.DirFS, a test's fstest.MapFS). Files of an
// fs.FS are read into owned memory; from one that implements
// [source.RangeFS], tensor data is read with parallel ranged requests,
// neighbouring tensors coalesced, straight into the destination buffers,
// each file pinned to the version seen at Open.
package ckpt
